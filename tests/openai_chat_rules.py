"""The rules of OpenAI's chat fine-tuning format, written from OpenAI's published guides (not from
Boltz's exporter), so that a test can hold an export up to them:

- "Supervised fine-tuning" / "Fine-tuning with function calling" (platform.openai.com/docs/
  guides/supervised-fine-tuning, .../fine-tuning#fine-tuning-examples): each line is
  `{"messages": [...], "tools": [...], "parallel_tool_calls": bool}`; roles system, user,
  assistant, tool; an assistant turn is `content` or `tool_calls` (items `{"id", "type":
  "function", "function": {"name", "arguments"}}` with `arguments` a JSON-encoded string); a tool
  message answers a call by its `tool_call_id`; `weight` (0 or 1) on assistant messages says
  whether that message is trained on; tools are `{"type": "function", "function": {"name",
  "description", "parameters"}}`.
- OpenAI's cookbook "Data preparation and analysis for chat model fine-tuning": every example
  has a `messages` list, every message a `role` and its `content`, no key beyond the recognised
  ones, and at least one assistant message.

`problems(example)` lists every rule an example breaks (empty: it passes); `check(example)`
raises AssertionError with them.
"""

from __future__ import annotations

import json
import re

TOP_KEYS = {"messages", "tools", "parallel_tool_calls"}
MESSAGE_KEYS = {
    "system": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "weight", "refusal"},
    "tool": {"role", "content", "tool_call_id"},
}
CALL_KEYS = {"id", "type", "function"}
CALL_FUNCTION_KEYS = {"name", "arguments"}
TOOL_KEYS = {"type", "function"}
TOOL_FUNCTION_KEYS = {"name", "description", "parameters", "strict"}
FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def check(example) -> None:
    found = problems(example)
    assert not found, "not OpenAI's chat fine-tuning format:\n" + "\n".join(found)


def problems(example) -> list[str]:
    out: list[str] = []
    if not isinstance(example, dict):
        return [f"an example is a JSON object, not {type(example).__name__}"]
    for key in sorted(set(example) - TOP_KEYS):
        out.append(f"unknown key {key!r} in the example")
    tools = _tools(example.get("tools", None), "tools" in example, out)
    parallel = example.get("parallel_tool_calls", True)
    if "parallel_tool_calls" in example and not isinstance(parallel, bool):
        out.append("parallel_tool_calls is a boolean")
    messages = example.get("messages")
    if not isinstance(messages, list) or not messages:
        out.append("messages is a non-empty list")
        return out
    pending: dict[str, str] = {}  # call id -> function name, calls not answered yet
    seen_ids: set[str] = set()
    assistants = 0
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            out.append(f"{where} is an object")
            continue
        role = message.get("role")
        if role not in MESSAGE_KEYS:
            out.append(f"{where}: role {role!r} is none of {', '.join(MESSAGE_KEYS)}")
            continue
        for key in sorted(set(message) - MESSAGE_KEYS[role]):
            out.append(f"{where}: unknown key {key!r} on a {role} message")
        if "weight" in message and (
            type(message["weight"]) is not int or message["weight"] not in (0, 1)
        ):
            out.append(f"{where}: weight is 0 or 1, not {message['weight']!r}")
        if "name" in message and not isinstance(message["name"], str):
            out.append(f"{where}: name is a string")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                out.append(f"{where}: a tool message has a tool_call_id")
            elif call_id not in pending:
                why = "was answered already" if call_id in seen_ids else "names no earlier call"
                out.append(f"{where}: tool_call_id {call_id!r} {why}")
            else:
                del pending[call_id]
            if not isinstance(message.get("content"), str):
                out.append(f"{where}: a tool message's content is a string")
            continue
        if pending and role != "tool":
            out.append(f"{where}: call(s) {sorted(pending)} not answered before this {role} turn")
            pending.clear()
        if role in ("system", "user"):
            if not isinstance(message.get("content"), str):
                out.append(f"{where}: a {role} message's content is a string")
            continue
        assistants += 1
        calls = message.get("tool_calls")
        if "tool_calls" in message:
            if not isinstance(calls, list) or not calls:
                out.append(f"{where}: tool_calls is a non-empty list")
                calls = []
            if parallel is False and len(calls) > 1:
                out.append(
                    f"{where}: {len(calls)} tool calls in one turn, parallel_tool_calls false"
                )
            for j, call in enumerate(calls):
                call_id = _call(call, f"{where}.tool_calls[{j}]", tools, out)
                if call_id is None:
                    continue
                if call_id in seen_ids:
                    out.append(f"{where}.tool_calls[{j}]: id {call_id!r} used twice")
                seen_ids.add(call_id)
                pending[call_id] = call["function"]["name"]
        if "content" in message:
            if not isinstance(message["content"], str):
                out.append(f"{where}: an assistant message's content is a string (or absent)")
        elif not calls:
            out.append(f"{where}: an assistant message has content or tool_calls")
    if assistants == 0:
        out.append("an example has at least one assistant message")
    return out


def _tools(tools, given: bool, out: list[str]) -> dict[str, dict] | None:
    """The declared functions by name (None when the example declares none)."""
    if not given:
        return None
    if not isinstance(tools, list):
        out.append("tools is a list")
        return {}
    declared: dict[str, dict] = {}
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            out.append(f"{where} is an object")
            continue
        for key in sorted(set(tool) - TOOL_KEYS):
            out.append(f"{where}: unknown key {key!r}")
        if tool.get("type") != "function":
            out.append(f"{where}: type is 'function'")
        function = tool.get("function")
        if not isinstance(function, dict):
            out.append(f"{where}: function is an object")
            continue
        for key in sorted(set(function) - TOOL_FUNCTION_KEYS):
            out.append(f"{where}.function: unknown key {key!r}")
        name = function.get("name")
        if not isinstance(name, str) or not FUNCTION_NAME.match(name):
            out.append(f"{where}.function: name {name!r} is 1-64 of a-z A-Z 0-9 _ -")
            continue
        if "description" in function and not isinstance(function["description"], str):
            out.append(f"{where}.function: description is a string")
        parameters = function.get("parameters")
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            out.append(f"{where}.function: parameters is a JSON schema of type object")
            parameters = {}
        if name in declared:
            out.append(f"{where}.function: {name!r} declared twice")
        declared[name] = parameters
    return declared


def _call(call, where: str, tools: dict[str, dict] | None, out: list[str]) -> str | None:
    """Check one tool call; its id if it can be answered."""
    if not isinstance(call, dict):
        out.append(f"{where} is an object")
        return None
    for key in sorted(set(call) - CALL_KEYS):
        out.append(f"{where}: unknown key {key!r}")
    if call.get("type") != "function":
        out.append(f"{where}: type is 'function'")
    function = call.get("function")
    if not isinstance(function, dict):
        out.append(f"{where}: function is an object")
        return None
    for key in sorted(set(function) - CALL_FUNCTION_KEYS):
        out.append(f"{where}.function: unknown key {key!r}")
    name, arguments = function.get("name"), function.get("arguments")
    if not isinstance(name, str) or not name:
        out.append(f"{where}.function: name is a string")
    elif tools is not None and name not in tools:
        out.append(f"{where}.function: {name!r} is not among the declared tools")
    if not isinstance(arguments, str):
        out.append(f"{where}.function: arguments is a JSON string, not {type(arguments).__name__}")
    else:
        try:
            parsed = json.loads(arguments)
        except ValueError:
            out.append(f"{where}.function: arguments {arguments[:60]!r} is not JSON")
        else:
            if not isinstance(parsed, dict):
                out.append(f"{where}.function: arguments encodes an object")
            elif tools and isinstance(name, str) and name in tools:
                missing = set(tools[name].get("required", [])) - set(parsed)
                if missing:
                    out.append(f"{where}.function: required argument(s) {sorted(missing)} missing")
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        out.append(f"{where}: id is a non-empty string")
        return None
    return call_id
