"""Modules that let code written for other libraries run on gangmesh."""
