"""Stage 1 of a migration, MXNet names -> torch names, in pipeline order: ``export`` (both models to ONNX), ``graph``
(the parameter DAG in canonical order), ``match`` (pairing two graphs), ``table`` (``NameMapping``, the result, and its
file), ``name_mapping`` (the three stages in one call), then ``verify`` (numeric check) and ``weights`` (values)."""
