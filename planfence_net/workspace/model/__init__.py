"""The workspace's pure model: fact keys and roles, drift classes, the check machine, hook
payloads, which files a shell command reads, dependency lists, intents. No I/O.
"""
