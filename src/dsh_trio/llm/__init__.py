"""The model seam: stream chunks, adapters, the block assembler, registry and retries."""

from ..values import (
    BlockEnd as BlockEnd,
    BlockStart as BlockStart,
    Finish as Finish,
    FinishReason as FinishReason,
    LlmFailure as LlmFailure,
    ReasoningDelta as ReasoningDelta,
    StreamChunk as StreamChunk,
    TextDelta as TextDelta,
    ToolCallDelta as ToolCallDelta,
    Usage as Usage,
)
from ._assembler import BlockAssembler as BlockAssembler
from ._deepseek import check_deepseek_model as check_deepseek_model
from ._error_chain import error_chain as error_chain

# ``redact_live_secrets``, the redaction of the live adapters' secrets, is for what
# reports a request outside this package (not part of the public API).
from ._log_guard import redact_live_secrets as redact_live_secrets
from ._openai import OpenAICompatibleAdapter as OpenAICompatibleAdapter
from ._redact import (
    redact_all as redact_all,
    repair_unicode as repair_unicode,
    shown_url as shown_url,
)
from ._registry import ModelRegistry as ModelRegistry, RetryPolicy as RetryPolicy
from ._runtime import ModelStream as ModelStream, stream_model as stream_model
from ._types import ModelAdapter as ModelAdapter, ModelRequest as ModelRequest

__all__ = [
    "BlockStart",
    "TextDelta",
    "ReasoningDelta",
    "ToolCallDelta",
    "BlockEnd",
    "Usage",
    "Finish",
    "FinishReason",
    "StreamChunk",
    "LlmFailure",
    "ModelRequest",
    "ModelAdapter",
    "BlockAssembler",
    "ModelRegistry",
    "RetryPolicy",
    "stream_model",
    "error_chain",
    "OpenAICompatibleAdapter",
    "check_deepseek_model",
    "redact_all",
    "shown_url",
    "repair_unicode",
]
