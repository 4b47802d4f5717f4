"""Boltz Python client SDK: drive Boltz sandboxes and attempts over the HTTP API.

    from boltz import Client

    with Client() as client:  # BOLTZ_URL and BOLTZ_TOKEN from the environment
        with client.sandbox(task="fix-add") as sb:
            print(sb.exec("python3 -m pytest -q tests").stdout)
            print(sb.check().passed)

Only the standard library and httpx are imported. See docs/SDK.md.
"""

from boltz._version import __version__
from boltz.aio import AsyncClient, AsyncFiles, AsyncSandbox
from boltz.client import Client, Files, Sandbox
from boltz.errors import (
    AuthError,
    BoltzError,
    BoltzFileNotFoundError,
    BoltzIsADirectoryError,
    BoltzPermissionError,
    CapacityError,
    ConnectionFailed,
    FileTooLarge,
    InfrastructureError,
    InvalidRequest,
    NotFound,
    OperationTimeout,
    SandboxClosed,
    SandboxGone,
    UnsafeArchive,
)
from boltz.evaluations import EvaluationReport, InstanceResult, PredictionRefusal
from boltz.pools import AsyncPool, Pool
from boltz.types import (
    Action,
    Attempt,
    CheckResult,
    Diff,
    DiffFile,
    EnvInfo,
    ExecResult,
    FileInfo,
    GroupStats,
    Observation,
    PoolInfo,
    SandboxInfo,
    StepResult,
    Task,
    TestResult,
)

__all__ = [
    "EvaluationReport",
    "InstanceResult",
    "PredictionRefusal",
    "Action",
    "AsyncClient",
    "AsyncPool",
    "EnvInfo",
    "GroupStats",
    "Observation",
    "Pool",
    "PoolInfo",
    "StepResult",
    "AsyncFiles",
    "AsyncSandbox",
    "Attempt",
    "AuthError",
    "BoltzError",
    "BoltzFileNotFoundError",
    "BoltzIsADirectoryError",
    "BoltzPermissionError",
    "CapacityError",
    "CheckResult",
    "Client",
    "ConnectionFailed",
    "Diff",
    "DiffFile",
    "ExecResult",
    "FileInfo",
    "FileTooLarge",
    "Files",
    "InfrastructureError",
    "InvalidRequest",
    "NotFound",
    "OperationTimeout",
    "Sandbox",
    "SandboxClosed",
    "SandboxGone",
    "SandboxInfo",
    "Task",
    "TestResult",
    "UnsafeArchive",
    "__version__",
]
