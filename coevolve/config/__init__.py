"""The run config: frozen pydantic sections (`models`) assembled in `CoevolveConfig`, loaded from YAML
with `--set key=value` overrides (`loading`).

    from coevolve.config import load_config
    cfg = load_config("configs/toolworld-smollm2.yaml", ["rollout.k=4"])
"""

from coevolve.config.evolution import (
    MOVED_FIELDS,
    SIGNAL_KINDS,
    AbstractConfig,
    EvolveConfig,
    ExploreConfig,
    MergeConfig,
    SignalsConfig,
    VerifyConfig,
)
from coevolve.config.loading import (
    ConfigError,
    apply_override,
    find_config,
    load_config,
    packaged_configs,
    parse_config,
)
from coevolve.config.models import (
    CoevolveConfig,
    DatasetConfig,
    EnvConfig,
    EvalConfig,
    ModelConfig,
    RolloutConfig,
    RunSection,
    RuntimeSection,
    StorageSection,
    TrackingSection,
    TrainConfig,
    WarmStartSection,
)
from coevolve.config.teacher import (
    LocalTeacherConfig,
    OpenAITeacherConfig,
    PolicyTeacherConfig,
    TeacherConfig,
)

__all__ = [
    "MOVED_FIELDS", "SIGNAL_KINDS", "AbstractConfig", "CoevolveConfig", "ConfigError", "DatasetConfig", "EnvConfig", "EvalConfig",
    "EvolveConfig", "ExploreConfig", "LocalTeacherConfig", "MergeConfig", "ModelConfig", "OpenAITeacherConfig",
    "PolicyTeacherConfig", "RolloutConfig", "RunSection", "RuntimeSection", "SignalsConfig", "StorageSection",
    "TeacherConfig", "TrackingSection", "TrainConfig", "VerifyConfig", "WarmStartSection", "apply_override", "find_config", "load_config",
    "packaged_configs", "parse_config",
]
