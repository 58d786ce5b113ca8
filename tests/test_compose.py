"""docker-compose.yml and Dockerfile agree with the repository (no Docker engine needed)."""

import os
import re

import yaml
from packaging.specifiers import SpecifierSet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load():
    with open(os.path.join(ROOT, "docker-compose.yml"), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def test_services_and_cluster_wiring():
    services = load()["services"]
    assert {"spark-master", "spark-worker-1", "spark-worker-2", "dedup"} <= set(services)
    master = services["spark-master"]["command"]
    assert "org.apache.spark.deploy.master.Master" in master
    port = master[master.index("--port") + 1]
    url = f"spark://spark-master:{port}"
    for worker in ("spark-worker-1", "spark-worker-2"):
        cmd = services[worker]["command"]
        assert "org.apache.spark.deploy.worker.Worker" in cmd and url in cmd
    dedup = services["dedup"]["command"]
    assert dedup[dedup.index("--master") + 1] == url
    published = {p.split(":")[0] for s in services.values() for p in s.get("ports", [])}
    assert {"8080", "7077", "4040"} <= published


def test_dedup_service_uses_files_and_flags_that_exist():
    compose = load()
    cmd = compose["services"]["dedup"]["command"]
    volumes = {v.split(":")[1]: v.split(":")[0] for v in compose["services"]["dedup"]["volumes"]}

    def host_path(container_path):
        if container_path.startswith("/opt/lsh-spark/"):
            return os.path.join(ROOT, container_path[len("/opt/lsh-spark/") :])
        for mount, src in volumes.items():
            if container_path.startswith(mount + "/") and src.startswith("./"):
                return os.path.join(ROOT, src[2:], container_path[len(mount) + 1 :])
        return None

    job = next(a for a in cmd if a.endswith(".py"))
    assert os.path.isfile(host_path(job))
    for flag in ("--config", "--input"):
        assert os.path.isfile(host_path(cmd[cmd.index(flag) + 1])), flag
    # Every flag passed to the job is one the job accepts.
    from lsh_spark.cli import build_parser

    parser = build_parser("dedup.py", "")
    known = {o for a in parser._actions for o in a.option_strings} | {"--overwrite"}
    job_args = cmd[cmd.index(job) + 1 :]
    assert {a for a in job_args if a.startswith("--")} <= known
    # Output and checkpoints live on volumes shared with the workers.
    out = cmd[cmd.index("--output") + 1]
    ckpt = cmd[cmd.index("--checkpoint-dir") + 1]
    for worker in ("spark-worker-1", "spark-worker-2"):
        mounts = [v.split(":")[1] for v in compose["services"][worker]["volumes"]]
        assert any(out.startswith(m + "/") for m in mounts)
        assert any(ckpt.startswith(m + "/") for m in mounts)


# The tested versions of each PySpark line: the newest, and 4.0 (the image's).
CONSTRAINTS = ("constraints.txt", "constraints-spark40.txt")


def pinned(name: str, constraints: str = "constraints.txt") -> str:
    """The version of ``name`` in ``constraints`` (for Python 3.11+)."""
    with open(os.path.join(ROOT, constraints), encoding="utf-8") as fh:
        text = fh.read()
    return re.search(rf"^{re.escape(name)}==([\w.]+)(?:;.*>= \"3.11\")?$", text, re.M).group(1)


def test_image_tag_is_pinned_and_matches_pyspark_version():
    with open(os.path.join(ROOT, "Dockerfile"), encoding="utf-8") as fh:
        base = re.search(r"^FROM\s+(\S+)", fh.read(), re.M).group(1)
    image, tag = base.split(":")
    assert image == "apache/spark" and tag != "latest"
    assert tag.startswith(pinned("pyspark", "constraints-spark40.txt") + "-")
    with open(os.path.join(ROOT, "Dockerfile"), encoding="utf-8") as fh:
        text = fh.read()
    for path in re.findall(r"^COPY\s+(.+?)\s+/opt/", text, re.M):
        for p in path.split():
            assert os.path.exists(os.path.join(ROOT, p)), p


def test_every_dependency_has_a_tested_version_and_the_image_uses_them():
    """Each runtime dependency and extra of pyproject.toml is pinned in the
    constraints of each PySpark line, numpy also for the image's Python 3.10, and
    each pin is inside the range; the image installs lsh-spark with the 4.0 line's
    constraints (its Spark's) and without the [spark] extra."""
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        project = tomllib.load(fh)["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += [r for r in extra if not r.startswith("lsh-spark")]
    for req in reqs:
        name = re.match(r"[A-Za-z0-9_.-]+", req).group(0)
        assert "==" not in req, f"{req}: a range in pyproject.toml, the pin in constraints.txt"
        for constraints in CONSTRAINTS:
            version = pinned(name, constraints)
            assert re.match(r"[\d.]+$", version), (name, constraints)
            assert SpecifierSet(req[len(name) :].split("[")[0]).contains(version), (req, version)
    for constraints in CONSTRAINTS:
        with open(os.path.join(ROOT, constraints), encoding="utf-8") as fh:
            assert re.search(r'^numpy==2\.2\.\d+; python_version < "3.11"$', fh.read(), re.M)
    with open(os.path.join(ROOT, "Dockerfile"), encoding="utf-8") as fh:
        text = fh.read()
    install = "pip install --no-cache-dir -c /opt/lsh-spark/constraints-spark40.txt /opt/lsh-spark"
    assert install + "\n" in text
