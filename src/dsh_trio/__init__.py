"""dsh_trio: LLM agents on trio, with structured concurrency all the way down.

Every agent is owned by a trio nursery; its turns and maintenance tasks are cancel
scopes; its inbox and history live in an append-only session log.

Example::

    import trio
    import dsh_trio as dsh
    from dsh_trio.testing import ScriptedModel, reply

    async def main() -> None:
        async with dsh.open_runtime(models={"scripted": ScriptedModel(reply("hi"))}) as runtime:
            options = dsh.AgentOptions(provider="scripted", model="demo")
            async with runtime.agents.open(options=options) as agent:
                agent.followup(dsh.user_message("hello"))
                await agent.when_idle()
                print(agent.session.derive_messages()[-1])

    trio.run(main)
"""

from . import mcp as mcp
from ._metadata import fixup_module_metadata as _fixup_module_metadata
from .composition import (
    DefaultModel as DefaultModel,
    ModelSelection as ModelSelection,
    PluginRow as PluginRow,
    PresetDefinition as PresetDefinition,
    PresetInfo as PresetInfo,
    PresetRegistry as PresetRegistry,
    PresetScope as PresetScope,
    install_model_selection as install_model_selection,
    load_preset as load_preset,
)
from .errors import (
    AgentBusyError as AgentBusyError,
    AgentCancelled as AgentCancelled,
    AgentDisposedError as AgentDisposedError,
    AgentReentrancyError as AgentReentrancyError,
    AgentStartError as AgentStartError,
    DshError as DshError,
    DuplicateMessageError as DuplicateMessageError,
    InvalidEventError as InvalidEventError,
    InvalidSessionIdError as InvalidSessionIdError,
    InvalidSpliceError as InvalidSpliceError,
    LlmError as LlmError,
    McpError as McpError,
    NoInitiatorError as NoInitiatorError,
    PersistenceError as PersistenceError,
    PersistenceNotConfiguredError as PersistenceNotConfiguredError,
    PersistenceSeqError as PersistenceSeqError,
    PresetError as PresetError,
    PresetLockedError as PresetLockedError,
    PresetNotFoundError as PresetNotFoundError,
    ProfileError as ProfileError,
    SessionCorruptError as SessionCorruptError,
    SessionExistsError as SessionExistsError,
    SessionFormatError as SessionFormatError,
    SessionLeaseError as SessionLeaseError,
    SessionLockedError as SessionLockedError,
    SessionNotFoundError as SessionNotFoundError,
    SessionReentrancyError as SessionReentrancyError,
    ToolArgumentsError as ToolArgumentsError,
    ToolDefinitionError as ToolDefinitionError,
    TurnFailedError as TurnFailedError,
    UnknownEventTypeError as UnknownEventTypeError,
    UnusableFileError as UnusableFileError,
)
from .events import (
    Abandoned as Abandoned,
    AgentCreated as AgentCreated,
    AgentDisposed as AgentDisposed,
    AgentErrorEvent as AgentErrorEvent,
    AgentStatusChanged as AgentStatusChanged,
    AssistantStream as AssistantStream,
    Committed as Committed,
    ConfigStartFailed as ConfigStartFailed,
    EventBus as EventBus,
    InboxClaimed as InboxClaimed,
    InboxDiscarded as InboxDiscarded,
    InboxInserted as InboxInserted,
    PresetSelected as PresetSelected,
    PreStep as PreStep,
    RequestFailed as RequestFailed,
    RequestProposal as RequestProposal,
    SessionEventAppended as SessionEventAppended,
    StreamChunkFrame as StreamChunkFrame,
    StreamEndFrame as StreamEndFrame,
    StreamStartFrame as StreamStartFrame,
    TurnStopping as TurnStopping,
)
from .llm import (
    BlockAssembler as BlockAssembler,
    BlockEnd as BlockEnd,
    BlockStart as BlockStart,
    Finish as Finish,
    FinishReason as FinishReason,
    LlmFailure as LlmFailure,
    ModelAdapter as ModelAdapter,
    ModelRegistry as ModelRegistry,
    ModelRequest as ModelRequest,
    OpenAICompatibleAdapter as OpenAICompatibleAdapter,
    ReasoningDelta as ReasoningDelta,
    RetryPolicy as RetryPolicy,
    StreamChunk as StreamChunk,
    TextDelta as TextDelta,
    ToolCallDelta as ToolCallDelta,
    Usage as Usage,
)
from .loop import (
    Agent as Agent,
    AgentScope as AgentScope,
    CancelSignal as CancelSignal,
    Inbox as Inbox,
    SystemPrompt as SystemPrompt,
    TurnResult as TurnResult,
    TurnStream as TurnStream,
    current_initiator as current_initiator,
    initiator as initiator,
    new_message_id as new_message_id,
    no_initiator as no_initiator,
    require_initiator as require_initiator,
    text_of as text_of,
    user_message as user_message,
)
from .nursery import (
    AgentExistsError as AgentExistsError,
    AgentHandle as AgentHandle,
    AgentRegistry as AgentRegistry,
    Runtime as Runtime,
    SessionStore as SessionStore,
    open_runtime as open_runtime,
)
from .observe import instrument as instrument
from .persistence import (
    JsonlPersistence as JsonlPersistence,
    SessionPersistence as SessionPersistence,
)
from .persistence.postgres import PostgresPersistence as PostgresPersistence
from .session import (
    Session as Session,
    SessionEvent as SessionEvent,
    SessionHeader as SessionHeader,
)
from .tools import (
    Tool as Tool,
    ToolContext as ToolContext,
    ToolRegistry as ToolRegistry,
    ToolResult as ToolResult,
    tool as tool,
)
from .values import (
    Aborted as Aborted,
    AgentOptions as AgentOptions,
    AgentStatus as AgentStatus,
    AssistantMessage as AssistantMessage,
    Blocked as Blocked,
    CallConfig as CallConfig,
    CancelCause as CancelCause,
    Completed as Completed,
    ContentBlock as ContentBlock,
    DisposedCancel as DisposedCancel,
    Enter as Enter,
    Errored as Errored,
    HookCancel as HookCancel,
    ImageBlock as ImageBlock,
    InboxTarget as InboxTarget,
    Interrupted as Interrupted,
    MaxTokens as MaxTokens,
    Message as Message,
    MessageId as MessageId,
    ModelSource as ModelSource,
    ParentCancel as ParentCancel,
    PluginSource as PluginSource,
    PreStepDecision as PreStepDecision,
    ReasoningBlock as ReasoningBlock,
    Reject as Reject,
    RequestErrorAction as RequestErrorAction,
    Retry as Retry,
    SessionId as SessionId,
    SurfaceReplace as SurfaceReplace,
    SystemMessage as SystemMessage,
    TextBlock as TextBlock,
    ToolCallBlock as ToolCallBlock,
    ToolCallId as ToolCallId,
    ToolResultBlock as ToolResultBlock,
    ToolSource as ToolSource,
    TurnEndReason as TurnEndReason,
    UserCancel as UserCancel,
    UserMessage as UserMessage,
    UserSource as UserSource,
)

__version__ = "0.1.0"


#: The public subpackages whose ``__all__`` is their part of the API, in the order a name
#: shared by two of them is claimed (the first wins). ``dsh_trio.testing`` fixes its own
#: names when it is imported (it is not imported here: it may need hypothesis).
_PUBLIC_MODULES = (
    "dsh_trio.errors",
    "dsh_trio.events",
    "dsh_trio.session",
    "dsh_trio.persistence",
    "dsh_trio.persistence.postgres",
    "dsh_trio.llm",
    "dsh_trio.tools",
    "dsh_trio.loop",
    "dsh_trio.composition",
    "dsh_trio.nursery",
    "dsh_trio.observe",
    "dsh_trio.mcp",
)

for _public in _PUBLIC_MODULES:
    _fixup_module_metadata(_public, __import__(_public, fromlist=["__all__"]).__all__)
_fixup_module_metadata(
    __name__, [name for name in globals() if not name.startswith("_")]
)
del _public
