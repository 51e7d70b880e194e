"""The owner daemon: one per agent, serving its records over Noise sessions."""
