"""Tool use: offer Python functions to the model and run the calls it writes.

`ToolEnv` is a complete multi-turn environment built from functions and a `score`;
`function_schema` and `parse_tool_calls` are its parts, for environments that manage tools
themselves (set `Env.tools` to the schemas, read the calls from each reply).
"""

from agenthub.tools._calls import ToolCall, parse_tool_calls
from agenthub.tools._env import ToolEnv
from agenthub.tools._schema import arguments_model, function_schema

__all__ = ["ToolCall", "ToolEnv", "arguments_model", "function_schema", "parse_tool_calls"]
