"""The gang runtime: Gang and its implementations (FakeGang, ProcessGroupGang), the fast
path, argument validation, communicators, the default group, the launcher's variables,
failure reports, and torch's private state (in ``_c10d`` only). Imports the planner."""
