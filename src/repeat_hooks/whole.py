"""``WholeModel``: a pydantic model whose dumps always hold every field."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class WholeModel(BaseModel):
    """A model whose dumps are always whole: every field counts as set, so ``exclude_unset=True`` dumps
    (the OpenAI Agents SDK's ``RunState.to_json()``, Temporal's OpenAI payload converter) keep the
    counters instead of dropping every field still at its default."""

    def model_post_init(self, context: Any, /) -> None:
        """Mark every field set (pydantic calls this after construction and validation)."""
        self.__pydantic_fields_set__.update(type(self).model_fields)
