"""Run the real Gemini CLI and OpenCode offline, against a ModelServer on 127.0.0.1.

    gemini_path, opencode_path   the executables `scripts/install-agents` put in the prefix
    skip_without                 at the top of a test module: one skip line when one is missing
    run_gemini    `gemini -p PROMPT --yolo -o json`: the Gemini API at the model server
                  ($GOOGLE_GEMINI_BASE_URL, an API key's auth chosen in the user settings),
                  the worktree trusted in ~/.gemini/trustedFolders.json as a user trusts it
    run_opencode  `opencode run PROMPT`: an OpenAI-compatible provider at the model server,
                  in the worktree's opencode.json

Each run gets a fresh HOME, the refusing proxy of `clients.base_env` and no key but a dummy
one, so nothing leaves the machine; it is bounded and its process group killed (`run_bounded`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .clients import DUMMY_KEY, ClientRun, agents_dir, base_env, run_bounded

GEMINI_MODEL = "gemini-2.5-pro"
MISSING = "the pinned {0} is not installed: run scripts/install-agents"


def executable(name: str) -> Path | None:
    """The installed executable `name` (gemini, opencode), or None."""
    path = agents_dir() / "node_modules" / ".bin" / name
    return path if os.access(path, os.X_OK) else None


def skip_without(*names: str) -> None:
    """Skip the calling test module, with one line, unless every client `names` is installed."""
    for name in names:
        if executable(name) is None:
            pytest.skip(MISSING.format(name), allow_module_level=True)


def gemini_home(home: Path, trusted: list[Path]) -> None:
    """HOME's Gemini CLI settings: auth by API key, and `trusted` folders trusted."""
    folder = home / ".gemini"
    folder.mkdir(parents=True, exist_ok=True)
    settings = folder / "settings.json"
    value = json.loads(settings.read_text()) if settings.exists() else {}
    value.setdefault("security", {})["auth"] = {"selectedType": "gemini-api-key"}
    settings.write_text(json.dumps(value, indent=2))
    rules = {str(p.resolve()): "TRUST_FOLDER" for p in trusted}
    (folder / "trustedFolders.json").write_text(json.dumps(rules, indent=2))


def run_gemini(
    server_url: str, cwd: Path, home: Path, prompt: str, extra: tuple[str, ...] = ()
) -> ClientRun:
    """One `gemini -p` run in `cwd` (trusted), its model at `server_url`; `extra` arguments
    go to `gemini` after the usual ones."""
    path = executable("gemini")
    assert path is not None, MISSING.format("gemini")
    gemini_home(home, [cwd])
    env = {
        **base_env(server_url, home),
        "GEMINI_API_KEY": DUMMY_KEY,
        "GOOGLE_GEMINI_BASE_URL": server_url,
        "GEMINI_CLI_NO_RELAUNCH": "true",
    }
    argv = [str(path), "-p", prompt, "--yolo", "-o", "json", "-m", GEMINI_MODEL, *extra]
    return run_bounded(argv, cwd, env)


def opencode_config(server_url: str) -> dict[str, object]:
    """OpenCode's config: one OpenAI-compatible provider at the model server, its model the
    default, every tool allowed without asking, nothing shared or updated."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted",
                "options": {"baseURL": f"{server_url}/v1", "apiKey": DUMMY_KEY},
                "models": {"model": {"name": "model", "tool_call": True}},
            }
        },
        "model": "scripted/model",
        "autoupdate": False,
        "share": "disabled",
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
    }


def run_opencode(server_url: str, cwd: Path, home: Path, prompt: str) -> ClientRun:
    """One `opencode run` in `cwd`, its model at `server_url` (config in the environment)."""
    path = executable("opencode")
    assert path is not None, MISSING.format("opencode")
    env = {
        **base_env(server_url, home),
        "OPENCODE_CONFIG_CONTENT": json.dumps(opencode_config(server_url)),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_SHARE": "1",
    }
    return run_bounded([str(path), "run", prompt], cwd, env)
