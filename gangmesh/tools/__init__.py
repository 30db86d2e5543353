"""The tools: the ``gangmesh`` command (plan, check), reports, tables and pictures, the local
launcher. Imports any layer below."""
