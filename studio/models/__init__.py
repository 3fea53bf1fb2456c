from studio.models.jobs import ImportJob, JobStatus, SimulationJob
from studio.models.projects import Membership, Project, Role
from studio.models.trajectories import (
    DOMAINS,
    Branch,
    BranchOrigin,
    Domain,
    Provenance,
    Step,
    Tag,
    Trajectory,
)

__all__ = [
    "DOMAINS",
    "Branch",
    "BranchOrigin",
    "Domain",
    "ImportJob",
    "JobStatus",
    "Membership",
    "Project",
    "Provenance",
    "Role",
    "SimulationJob",
    "Step",
    "Tag",
    "Trajectory",
]
