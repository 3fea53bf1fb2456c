"""Train a policy with TRL's GRPOTrainer in a studio world: `train.py` (README: "Training an
agent in a world (GRPO)")."""
