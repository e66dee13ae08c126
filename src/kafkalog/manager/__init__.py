"""kafkalog.manager: the LogManager over one or more log directories (Kafka's LogManager)."""

from kafkalog.manager.config import ManagerConfig
from kafkalog.manager.config_ops import AlterConfigOp, AlterConfigOpType
from kafkalog.manager.log_manager import LogManager
from kafkalog.manager.scheduler import Scheduler
from kafkalog.manager.server_config import ServerConfig

__all__ = [
    "AlterConfigOp",
    "AlterConfigOpType",
    "LogManager",
    "ManagerConfig",
    "Scheduler",
    "ServerConfig",
]
