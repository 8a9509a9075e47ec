#!/usr/bin/env python3
"""Checks Kubernetes manifests against the "restricted" Pod Security Standard (kubernetes.io/docs/concepts/
security/pod-security-standards, the rules a `pod-security.kubernetes.io/enforce: restricted` namespace
admits by), and against this project's own rules: every container with resources (requests and a memory
limit), every long-running container with a liveness and a readiness probe.

    pod_security.py FILE...     prints one line per violation and exits 1, or prints "pod security: OK"
"""

import sys

import yaml

ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                   "projected", "secret"}


def pod_specs(doc):
    kind = doc.get("kind")
    spec = doc.get("spec", {})
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        yield kind, doc["metadata"]["name"], spec["template"]["spec"]
    elif kind == "CronJob":
        yield kind, doc["metadata"]["name"], spec["jobTemplate"]["spec"]["template"]["spec"]
    elif kind == "Pod":
        yield kind, doc["metadata"]["name"], spec


def check(kind, name, pod):
    where = f"{kind}/{name}"
    sc = pod.get("securityContext", {})
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            yield f"{where}: {key}"
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            yield f"{where}: volume {volume['name']} of type {kinds - ALLOWED_VOLUMES}"
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        cw = f"{where} container {c['name']}"
        csc = c.get("securityContext", {})
        if csc.get("privileged"):
            yield f"{cw}: privileged"
        if csc.get("allowPrivilegeEscalation") is not False:
            yield f"{cw}: allowPrivilegeEscalation must be false"
        caps = csc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            yield f"{cw}: capabilities.drop must hold ALL"
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            yield f"{cw}: capabilities added: {caps['add']}"
        if not (csc.get("runAsNonRoot", sc.get("runAsNonRoot")) is True):
            yield f"{cw}: runAsNonRoot must be true"
        if csc.get("runAsUser", sc.get("runAsUser")) == 0:
            yield f"{cw}: runs as uid 0"
        seccomp = csc.get("seccompProfile", sc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            yield f"{cw}: seccompProfile.type must be RuntimeDefault or Localhost"
        resources = c.get("resources", {})
        if not resources.get("requests") or "memory" not in resources.get("limits", {}):
            yield f"{cw}: resources need requests and a memory limit"
        if kind in ("Deployment", "StatefulSet", "DaemonSet"):
            for probe in ("livenessProbe", "readinessProbe"):
                if probe not in c:
                    yield f"{cw}: no {probe}"


def main():
    problems = []
    for path in sys.argv[1:]:
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                for kind, name, pod in pod_specs(doc or {}):
                    problems.extend(check(kind, name, pod))
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print("pod security: OK")


if __name__ == "__main__":
    main()
