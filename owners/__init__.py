"""Data, not code: mapped into the wheel as planfence_net.defaults.owners."""
