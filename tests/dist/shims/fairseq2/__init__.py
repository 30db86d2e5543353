"""A stand-in ``fairseq2`` package whose ``gang`` module is gangmesh, to run fairseq2-style code."""
