"""Examples that use AgentWorld Studio from outside, as its users' programs do (over HTTP and
WebSocket only: nothing here imports Django or the studio)."""
