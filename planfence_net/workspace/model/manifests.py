"""Which lockfiles belong to a manifest (pure): an automatic plan that read a manifest
holds the lockfiles beside it as `lockfile` facts, relevant to it by default (as the
explicit mode's `workspace trust --lockfiles auto` declares them).

`beside(rel)` names, for a manifest at worktree-relative path `rel`, the lockfiles that
may pin it: in its folder and in each folder above it up to the worktree root (workspaces
of npm, pnpm, yarn, Cargo and uv keep one lockfile at their root). The caller keeps those
that exist.
"""

from __future__ import annotations

NODE = ("package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "bun.lock")
LOCKS: dict[str, tuple[str, ...]] = {
    "package.json": NODE,
    "pyproject.toml": ("poetry.lock", "uv.lock", "pdm.lock"),
    "Pipfile": ("Pipfile.lock",),
    "requirements.in": ("requirements.txt",),
    "Cargo.toml": ("Cargo.lock",),
    "go.mod": ("go.sum",),
    "Gemfile": ("Gemfile.lock",),
    "composer.json": ("composer.lock",),
    "mix.exs": ("mix.lock",),
    "flake.nix": ("flake.lock",),
}


def beside(rel: str) -> list[str]:
    """The worktree-relative paths of the lockfiles that may pin the manifest `rel` (its
    folder first, then each folder above it); [] when `rel` is not a manifest."""
    folders, _, name = rel.rpartition("/")
    locks = LOCKS.get(name, ())
    if not locks:
        return []
    parts = folders.split("/") if folders else []
    found = []
    for depth in range(len(parts), -1, -1):
        folder = "/".join(parts[:depth])
        found += [f"{folder}/{lock}" if folder else lock for lock in locks]
    return found
