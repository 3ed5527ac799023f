"""The SDK results a hook hands back. rc11 treats ``None`` as an error, never as "continue"."""

from __future__ import annotations

from mistralai.vibe.harness.core.protocol import ContentBlock, TextContentBlock
from mistralai.vibe.harness.runtime.capabilities import (
    PostLlmCallHookAccept,
    PostToolCallHookContinue,
    PostToolCallHookInvocation,
    PreLlmCallHookContinue,
    PreLlmCallHookSkip,
    PreToolCallHookContinue,
    PreToolCallHookInvocation,
    PreToolCallHookSkip,
)


def text(message: str) -> list[ContentBlock]:
    """``message`` as the content blocks a skip carries (rc11 rejects an empty reason)."""
    return [TextContentBlock(text=message)]


def run_tool(call: PreToolCallHookInvocation) -> PreToolCallHookContinue:
    """Let the tool run with the arguments the model gave."""
    return PreToolCallHookContinue(effective_arguments=call.tool_call.call.arguments)


def refuse_tool(message: str) -> PreToolCallHookSkip:
    """Do not run the tool: the model gets ``message`` as the call's tool message."""
    return PreToolCallHookSkip(reason=text(message))


def call_model() -> PreLlmCallHookContinue:
    """Let the model call happen."""
    return PreLlmCallHookContinue()


def end_turn(message: str) -> PreLlmCallHookSkip:
    """Skip the model call: the turn ends (rc11 drops ``message``; the guard keeps it in its state)."""
    return PreLlmCallHookSkip(reason=text(message))


def keep_result(result: PostToolCallHookInvocation) -> PostToolCallHookContinue:
    """Hand the tool's result on unchanged."""
    return PostToolCallHookContinue(tool_result=result.tool_result)


def keep_answer() -> PostLlmCallHookAccept:
    """Accept the model's reply unchanged: the guard never rewrites what the model said."""
    return PostLlmCallHookAccept()
