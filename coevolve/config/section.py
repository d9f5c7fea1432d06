"""The base of every config section: frozen, unknown keys rejected, a docstring per field, finite floats.

Floats refuse `.inf` and `.nan` (`--set train.lr=.inf` is one `ConfigError` naming `train.lr`): a bound such
as `gt=0` lets infinity through, and one infinite learning rate or temperature turns every weight NaN.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)
