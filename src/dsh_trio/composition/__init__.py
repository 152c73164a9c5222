"""Composition: preset generations, agent binding, declared agents.

A preset is a named list of plugin rows; each row names a setup function
(``package.module:function``) that registers tools, listeners, prompt sections,
runtime contexts, services and option defaults into a :class:`PresetScope`.
``runtime.presets`` (:class:`PresetRegistry`) activates each registration into a
generation that agents bind to.
"""

from ._declared import (
    DeclaredAgent as DeclaredAgent,
    RuntimeConfig as RuntimeConfig,
    load_runtime_config as load_runtime_config,
)
from ._definition import (
    PluginRow as PluginRow,
    PresetDefinition as PresetDefinition,
    load_preset as load_preset,
)
from ._generation import (
    Generation as Generation,  # runtime use only
    PresetGeneration as PresetGeneration,
)
from ._model import (
    DefaultModel as DefaultModel,
    ModelSelection as ModelSelection,
    install_model_selection as install_model_selection,
)
from ._registry import (
    PresetInfo as PresetInfo,
    PresetInventory as PresetInventory,
    PresetRegistry as PresetRegistry,
)
from ._scope import PresetScope as PresetScope
from ._views import (  # runtime use only
    CompositionSections as CompositionSections,
    CompositionTools as CompositionTools,
    logged_preset as logged_preset,
)

__all__ = [
    "DeclaredAgent",
    "DefaultModel",
    "PluginRow",
    "PresetDefinition",
    "PresetGeneration",
    "PresetInfo",
    "PresetInventory",
    "PresetRegistry",
    "ModelSelection",
    "PresetScope",
    "RuntimeConfig",
    "install_model_selection",
    "load_preset",
    "load_runtime_config",
]
