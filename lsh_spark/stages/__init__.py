"""The pipeline's stages: each composes the pure DataFrame functions of the
library's modules, times them and writes its datasets (see :mod:`lsh_spark.pipeline`)."""
