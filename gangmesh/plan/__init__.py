"""The planner: dimensions (the registry), layouts, views, the expert view, clusters,
locality and placement, MeshTopology. Pure numpy: imports nothing of torch, and nothing of
gangmesh outside this package."""
