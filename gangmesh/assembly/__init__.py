"""Assembly: the root gang's setup, rendezvous and agreement, meshes (built with
``DeviceMesh.from_group``), Gangs and the create_* functions, the layout record. Imports the
runtime and the planner."""
