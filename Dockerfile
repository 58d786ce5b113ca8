# lsh-spark on the official Apache Spark image (Spark 4.0.1, Scala 2.13, Java 17, Python 3).
# Spark and PySpark come from the image (lsh-spark's [spark] extra is not installed); the
# other dependencies at the versions tested with PySpark 4.0, constraints-spark40.txt
# (numpy 2.2 because the image's Python is 3.10; the MinHash arithmetic is integer-exact,
# so signatures are identical to those computed with numpy 2.3).
FROM apache/spark:4.0.1-scala2.13-java17-python3-ubuntu

USER root
COPY pyproject.toml README.md constraints-spark40.txt /opt/lsh-spark/
COPY lsh_spark /opt/lsh-spark/lsh_spark
RUN pip install --no-cache-dir -c /opt/lsh-spark/constraints-spark40.txt /opt/lsh-spark
COPY jobs /opt/lsh-spark/jobs
COPY conf /opt/lsh-spark/conf
COPY data/sample /opt/lsh-spark/data/sample
RUN mkdir -p /output /checkpoints && chown -R spark:spark /output /checkpoints
USER spark
WORKDIR /opt/lsh-spark
