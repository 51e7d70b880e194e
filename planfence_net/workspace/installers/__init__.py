"""Installers: merging our hooks into the clients' settings, Codex's trust records, the git
commit gate, the recovery text for the model, and `hook status`.
"""
