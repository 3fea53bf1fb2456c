from studio.models.annotations import (
    Adjudication,
    AnnotationQueue,
    AnnotationVersion,
    QueueClaim,
    QueueItem,
    StepAnnotation,
    Verdict,
)
from studio.models.arena import ArenaPair, ArenaRun, PairWinner
from studio.models.behaviour import (
    BehaviourCluster,
    BehaviourLabel,
    BehaviourSearch,
    BehaviourUnit,
)
from studio.models.campaigns import Campaign, CampaignEpisode, CampaignSource, SlotStatus
from studio.models.datasets import Dataset, DatasetItem, DatasetVersion, ExportJob
from studio.models.endpoints import EndpointKind, EndpointRole, ModelEndpoint
from studio.models.evaluations import EvaluationRun, EvaluationSample, SampleStage
from studio.models.finetunes import FineTuneMethod, FineTuneRun
from studio.models.jobs import ImportJob, JobStatus, SimulationJob
from studio.models.judging import JudgeJob, JudgeTarget, StepJudgement
from studio.models.perturbations import Perturbation
from studio.models.projects import Membership, Project, Role
from studio.models.search import SavedSearch
from studio.models.tokens import ApiToken, McpSession, TokenRateWindow
from studio.models.trajectories import (
    DOMAINS,
    Branch,
    BranchOrigin,
    Domain,
    ObservationSource,
    Provenance,
    Step,
    Tag,
    Trajectory,
)
from studio.models.workers import WorkerHeartbeat
from studio.models.worlds import World, WorldVersion

__all__ = [
    "Adjudication",
    "AnnotationQueue",
    "AnnotationVersion",
    "ApiToken",
    "McpSession",
    "TokenRateWindow",
    "ArenaPair",
    "ArenaRun",
    "BehaviourCluster",
    "BehaviourLabel",
    "BehaviourSearch",
    "BehaviourUnit",
    "Campaign",
    "CampaignEpisode",
    "CampaignSource",
    "SlotStatus",
    "DOMAINS",
    "Dataset",
    "DatasetItem",
    "DatasetVersion",
    "Branch",
    "BranchOrigin",
    "Domain",
    "EndpointKind",
    "EndpointRole",
    "EvaluationRun",
    "EvaluationSample",
    "ExportJob",
    "FineTuneMethod",
    "FineTuneRun",
    "ImportJob",
    "JobStatus",
    "JudgeJob",
    "JudgeTarget",
    "Membership",
    "ModelEndpoint",
    "ObservationSource",
    "PairWinner",
    "Perturbation",
    "Project",
    "Provenance",
    "QueueClaim",
    "QueueItem",
    "Role",
    "SampleStage",
    "SavedSearch",
    "SimulationJob",
    "Step",
    "StepJudgement",
    "StepAnnotation",
    "Tag",
    "Trajectory",
    "Verdict",
    "WorkerHeartbeat",
    "World",
    "WorldVersion",
]
