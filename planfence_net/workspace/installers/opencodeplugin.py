"""`planfence hook install|uninstall|status opencode`: our OpenCode plugin, a JS module in
OpenCode's plugin folder (OpenCode loads every `{plugin,plugins}/*.{js,ts}` there at start):

    project   ROOT/.opencode/plugins/planfence.js
    user      $XDG_CONFIG_HOME/opencode/plugins/planfence.js (~/.config/opencode/...)

The plugin is ours, so it fails closed itself: `tool.execute.before` sends each call to
`planfence hook opencode` (`clients.opencode`: OpenCode's tool names and args; where a
workspace owner serves the project, behind the lean client, `leanhook.lean_argv`) and throws,
which blocks the call with the message as the tool's error, when the hook blocks (exit 2),
cannot start, exits otherwise, or gives no answer within TIMEOUT seconds. OpenCode's `batch`
tool (behind `experimental.batch_tool`) runs its sub-calls without the plugin hooks: the
plugin blocks a batch unless every sub-call only reads (READ_ONLY), and records those reads
after it. `tool.execute.after` records the call (a file written, in automatic mode a file
read); a reason it returns is appended to the tool's output, since the call already ran.
A call that fails inside OpenCode never reaches `tool.execute.after`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ...cluster.command import executable
from .clients import TIMEOUT, check_timeout, hook_args, project_root
from .clientstatus import LEAN, probe
from .leanhook import is_lean, lean_argv
from .status import ACTIVE, BROKEN, MISSING, UNSERVED, AgentStatus, serving

FILE = "planfence.js"
MARK = "// PlanFence: planfence hook install|uninstall opencode"
READ_ONLY = ("read", "glob", "grep", "list", "webfetch", "websearch", "todoread", "skill")
_ARGV = re.compile(r"^const COMMAND = (\[.*\])$", re.MULTILINE)

PLUGIN = """{mark}
// Sends every tool call to PlanFence, which blocks a write when a file this session read, the
// branch or HEAD changed since. It fails closed: a hook that cannot run blocks the call.
import {{ spawn }} from "node:child_process"

const COMMAND = {argv}
const TIMEOUT_MS = {timeout_ms}
const READ_ONLY = new Set({read_only})

function ask(payload) {{
  return new Promise((resolve) => {{
    let child
    try {{
      child = spawn(COMMAND[0], COMMAND.slice(1), {{ stdio: ["pipe", "pipe", "pipe"] }})
    }} catch (error) {{
      resolve({{ code: -1, stdout: "", stderr: String(error) }})
      return
    }}
    let stdout = ""
    let stderr = ""
    const timer = setTimeout(() => {{
      stderr += `no answer within ${{TIMEOUT_MS}} ms`
      child.kill("SIGKILL")
    }}, TIMEOUT_MS)
    child.stdout.on("data", (chunk) => (stdout += chunk))
    child.stderr.on("data", (chunk) => (stderr += chunk))
    child.on("error", (error) => {{
      clearTimeout(timer)
      resolve({{ code: -1, stdout, stderr: String(error) }})
    }})
    child.on("close", (code) => {{
      clearTimeout(timer)
      resolve({{ code: code ?? -1, stdout, stderr }})
    }})
    child.stdin.on("error", () => {{}})
    child.stdin.end(JSON.stringify(payload))
  }})
}}

function told(answer) {{
  try {{
    return JSON.parse(answer.stdout).hookSpecificOutput.additionalContext ?? ""
  }} catch {{
    return ""
  }}
}}

export const PlanFence = async ({{ directory }}) => {{
  const payload = (event, input, tool, args, more) => ({{
    hook_event_name: event,
    session_id: input.sessionID,
    cwd: directory,
    tool_name: tool,
    tool_input: args ?? {{}},
    tool_use_id: input.callID,
    ...more,
  }})
  const after = async (input, tool, args, output) => {{
    const text = typeof output?.output === "string" ? output.output : ""
    const answer = await ask(payload("PostToolUse", input, tool, args, {{ tool_response: text }}))
    const note = answer.code === 0 ? told(answer) : answer.stderr.trim()
    if (note && output && typeof output.output === "string") output.output += "\\n\\n" + note
  }}
  return {{
    "tool.execute.before": async (input, output) => {{
      if (input.tool === "batch") {{
        const calls = output.args?.tool_calls ?? []
        const changing = calls.filter((call) => !READ_ONLY.has(call?.tool))
        if (changing.length)
          throw new Error(
            "PlanFence blocked batch: a batch runs its calls without PlanFence's check, so a " +
              "batch may only read. Make each change as a call of its own.",
          )
        return
      }}
      const answer = await ask(payload("PreToolUse", input, input.tool, output.args))
      if (answer.code === 0) return
      const said = answer.stderr.trim()
      if (answer.code === 2 && said) throw new Error(said)
      throw new Error(
        `PlanFence blocked this call: the hook failed (exit ${{answer.code}}${{said ? ": " + said : ""}}); it fails closed`,
      )
    }},
    "tool.execute.after": async (input, output) => {{
      if (input.tool === "batch") {{
        for (const call of input.args?.tool_calls ?? [])
          await after(input, call.tool, call.parameters, undefined)
        return
      }}
      await after(input, input.tool, input.args, output)
    }},
  }}
}}
"""


def plugin_path(root: Path, user: bool = False) -> Path:
    """Where OpenCode loads our plugin from (see module doc)."""
    if user:
        config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
        return Path(config) / "opencode" / "plugins" / FILE
    return root / ".opencode" / "plugins" / FILE


def plugin_text(argv: list[str], timeout: float = TIMEOUT) -> str:
    """Our plugin, running `argv` for each call (a JS module; `argv` as a JSON array)."""
    return PLUGIN.format(
        mark=MARK,
        argv=json.dumps(argv),
        timeout_ms=int(timeout * 1000),
        read_only=json.dumps(list(READ_ONLY)),
    )


def install(
    project: Path,
    *,
    cluster: Path | None = None,
    user: bool = False,
    timeout: float | None = None,
    explicit: bool = False,
    command: list[str] | None = None,
) -> Path:
    """Write our plugin (replacing ours; see module doc); returns its path. `command`
    replaces the argv (tests). Raises ConfigError for a `timeout` out of range, or when a
    plugin of someone else's has our file's name."""
    from ...core.errors import ConfigError

    check_timeout(timeout)
    root = project_root(project)
    path = plugin_path(root, user)
    if path.exists() and MARK not in path.read_text(errors="replace"):
        raise ConfigError(f"{path} is not ours; not touching it")
    ordinary = [executable(), *hook_args("opencode", cluster, user, timeout, explicit)]
    argv = command or lean_argv(ordinary, None if user else root, cluster)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".planfence-tmp")
    tmp.write_text(plugin_text(argv))
    tmp.replace(path)
    return path


def uninstall(project: Path, *, user: bool = False) -> tuple[Path, bool]:
    """Remove our plugin; returns its path and whether it was there."""
    path = plugin_path(project_root(project), user)
    if not path.exists() or MARK not in path.read_text(errors="replace"):
        return path, False
    path.unlink()
    return path, True


def status(root: Path) -> AgentStatus:
    """Whether our plugin is active for `root`: present (project or user), its command answers
    a read (never gated) in our plugin's payload form, and a workspace owner serves `root`."""
    import shlex

    install_step = f"planfence hook install opencode --project {shlex.quote(str(root))}"
    paths = [plugin_path(root), plugin_path(root, user=True)]
    found = [p for p in paths if p.exists() and MARK in p.read_text(errors="replace")]
    where = tuple(map(str, found))
    if not found:
        listed = ", ".join(map(str, paths))
        return AgentStatus("opencode", MISSING, f"no PlanFence plugin at {listed}", install_step)
    matched = _ARGV.search(found[0].read_text())
    argv = json.loads(matched.group(1)) if matched else []
    payload = {
        "hook_event_name": "PreToolUse", "session_id": "planfence-hook-status", "cwd": str(root),
        "tool_name": "read", "tool_input": {"filePath": str(root / "README.md")},
    }  # fmt: skip
    problem = probe(shlex.join(argv), payload, root) if argv else "the plugin names no command"
    if problem:
        return AgentStatus("opencode", BROKEN, problem, install_step, where)
    cluster = Path(argv[argv.index("--cluster") + 1]) if "--cluster" in argv[:-1] else None
    unserved = serving(root, cluster)
    if unserved:
        return AgentStatus("opencode", UNSERVED, unserved[0], unserved[1], where)
    detail = "the plugin runs the hook and fails closed (it throws when the hook cannot answer)"
    if is_lean(shlex.join(argv)):
        detail += f"; {LEAN}"
    return AgentStatus("opencode", ACTIVE, detail, "", where)
