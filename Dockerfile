# lsh-spark on the official Apache Spark image (Spark 4.0.1, Scala 2.13, Java 17, Python 3).
# Spark and PySpark come from the image; only lsh-spark's Python dependencies are added
# (numpy < 2.3 because the image's Python is 3.10; the MinHash arithmetic is integer-exact,
# so signatures are identical to those computed with the project's pinned numpy).
FROM apache/spark:4.0.1-scala2.13-java17-python3-ubuntu

USER root
RUN pip install --no-cache-dir "numpy>=2.2,<2.3" "pyarrow==21.0.0" "pandas==2.3.3" "pyyaml==6.0.3" \
    "fastwarc==2.0.1" "resiliparse==2.0.1" "matplotlib==3.10.9" "xxhash==3.6.0" \
    "numba==0.67.0"
COPY pyproject.toml README.md /opt/lsh-spark/
COPY lsh_spark /opt/lsh-spark/lsh_spark
RUN pip install --no-cache-dir --no-deps /opt/lsh-spark
COPY jobs /opt/lsh-spark/jobs
COPY conf /opt/lsh-spark/conf
COPY data/sample /opt/lsh-spark/data/sample
RUN mkdir -p /output /checkpoints && chown -R spark:spark /output /checkpoints
USER spark
WORKDIR /opt/lsh-spark
