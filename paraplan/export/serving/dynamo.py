"""An NVIDIA Dynamo deployment of a serving plan: a ``DynamoGraphDeployment`` (Kubernetes manifest,
``nvidia.com/v1alpha1``) with the frontend and the engine's workers, prefill and decode pools for a
disaggregated plan (one pool of replicas for an aggregated one).

Each worker runs the engine's Dynamo module with the engine's own flags (serving_exports.md Sec. 1,
"NVIDIA Dynamo"): ``python3 -m dynamo.vllm --model MODEL <vLLM flags>``, ``python3 -m dynamo.sglang
--model-path MODEL <SGLang flags>``, ``python3 -m dynamo.trtllm --model-path MODEL
--extra-engine-args FILE`` (the YAML in a ConfigMap mounted at /config); the role is
``--disaggregation-mode prefill|decode`` (not mixed with the legacy ``--is-prefill-worker``, which
AIConfigurator's validator rejects). The worker args sit under
``spec.services.<Worker>.extraPodSpec.mainContainer.args``, where AIConfigurator's validators read
them; tests/export/test_vllm_parser.py and test_sglang_parser.py parse them with the engines' own
parsers after stripping the Dynamo-only flags. A worker wider than a node gets
``multinode.nodeCount``.
"""

from __future__ import annotations

from typing import Any

import yaml

from paraplan.cost.serving import ServingPlan, Workload
from paraplan.export.serving.common import Memory, checked_workers, memory_for, per_rank
from paraplan.export.serving.sglang import sglang_server_args
from paraplan.export.serving.trtllm import trtllm_extra_options
from paraplan.export.serving.vllm import vllm_engine_args
from paraplan.hardware import Cluster
from paraplan.rules.serving import ENGINE_VERSIONS, EngineWorker

__all__ = ["DYNAMO_ONLY_FLAGS", "IMAGES", "dynamo_worker_args", "dynamo_deployment", "render"]

DYNAMO_ONLY_FLAGS = ("--disaggregation-mode", "--is-prefill-worker", "--is-decode-worker")
"""Flags dynamo.vllm takes that vLLM's parser does not (stripped before checking, as AIC does)."""
IMAGES = {
    "vllm": "nvcr.io/nvidia/ai-dynamo/vllm-runtime",
    "sglang": "nvcr.io/nvidia/ai-dynamo/sglang-runtime",
    "trtllm": "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime",
}
"""Dynamo's runtime image per engine (tag left to the deployer: the release that ships the engine
version the flags are written for)."""
_SERVICE = {"vllm": "Vllm", "sglang": "Sglang", "trtllm": "Trtllm"}


def _config_name(worker: EngineWorker) -> str:
    return f"{worker.role or 'agg'}.yaml"


def dynamo_worker_args(
    engine: str,
    worker: EngineWorker,
    workload: Workload,
    model_id: str,
    memory: Memory,
    max_model_len: int | None = None,
) -> list[str]:
    """The args of one worker's ``python3 -m dynamo.<engine>``."""
    mem = memory_for(memory, worker)
    if engine == "vllm":
        args = ["--model", model_id, *vllm_engine_args(worker, workload, mem, max_model_len)]
        if worker.role is not None:
            args += ["--disaggregation-mode", worker.role]
        return args
    if engine == "sglang":
        return ["--model-path", model_id, *sglang_server_args(worker, workload, mem, max_model_len)]
    args = ["--model-path", model_id, "--extra-engine-args", f"/config/{_config_name(worker)}"]
    if worker.role is not None:
        args += ["--disaggregation-mode", worker.role]
    return args


def _trtllm_config(
    worker: EngineWorker, workload: Workload, memory: Memory, max_model_len: int | None
) -> str:
    options: dict[str, Any] = {
        "backend": "pytorch",
        "tensor_parallel_size": worker.tp,
        "pipeline_parallel_size": worker.pp,
    }
    options["max_batch_size"] = per_rank(worker.max_batch, worker)
    options["max_num_tokens"] = per_rank(worker.max_num_tokens, worker)
    if max_model_len is not None:
        options["max_seq_len"] = max_model_len
    options.update(trtllm_extra_options(worker, workload, memory_for(memory, worker)))
    return yaml.safe_dump(options, sort_keys=False)


def dynamo_deployment(
    engine: str,
    plan: ServingPlan,
    workload: Workload,
    model_id: str,
    memory: Memory,
    *,
    cluster: Cluster | None = None,
    max_model_len: int | None = None,
    name: str = "paraplan",
) -> list[dict[str, Any]]:
    """The manifest's documents: the DynamoGraphDeployment, and for TensorRT-LLM the ConfigMap of
    the workers' engine YAMLs."""
    workers = checked_workers(engine, plan, workload, cluster, max_model_len)
    per_node = cluster.devices_per_node if cluster is not None else None
    services: dict[str, Any] = {
        "Frontend": {
            "dynamoNamespace": name,
            "componentType": "frontend",
            "replicas": 1,
            "extraPodSpec": {
                "mainContainer": {
                    "image": IMAGES[engine],
                    "command": ["python3", "-m", "dynamo.frontend"],
                    "args": ["--http-port", "8000"],
                }
            },
        }
    }
    configs: dict[str, str] = {}
    for w in workers:
        service: dict[str, Any] = {"dynamoNamespace": name, "componentType": "worker"}
        if w.role is not None:
            service["subComponentType"] = w.role
        service["replicas"] = w.count
        gpus = w.gpus
        if per_node is not None and gpus > per_node:
            service["multinode"] = {"nodeCount": -(-gpus // per_node)}
            gpus = per_node
        service["resources"] = {"limits": {"gpu": str(gpus)}}
        container: dict[str, Any] = {
            "image": IMAGES[engine],
            "command": ["python3", "-m", f"dynamo.{engine}"],
            "args": dynamo_worker_args(engine, w, workload, model_id, memory, max_model_len),
        }
        if engine == "trtllm":
            configs[_config_name(w)] = _trtllm_config(w, workload, memory, max_model_len)
            container["volumeMounts"] = [{"name": "engine-config", "mountPath": "/config"}]
        service["extraPodSpec"] = {"mainContainer": container}
        if engine == "trtllm":
            service["extraPodSpec"]["volumes"] = [
                {"name": "engine-config", "configMap": {"name": f"{name}-engine-config"}}
            ]
        role = (w.role or "").capitalize()
        services[f"{_SERVICE[engine]}{role}Worker"] = service
    docs: list[dict[str, Any]] = []
    if configs:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{name}-engine-config"},
                "data": configs,
            }
        )
    docs.append(
        {
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "DynamoGraphDeployment",
            "metadata": {"name": name},
            "spec": {"services": services},
        }
    )
    return docs


def render(
    engine: str,
    plan: ServingPlan,
    workload: Workload,
    model_id: str,
    memory: Memory,
    *,
    cluster: Cluster | None = None,
    max_model_len: int | None = None,
) -> str:
    """The manifest as YAML text (``kubectl apply -f``)."""
    docs = dynamo_deployment(
        engine, plan, workload, model_id, memory, cluster=cluster, max_model_len=max_model_len
    )
    head = (
        f"# paraplan serving export: NVIDIA Dynamo {plan.mode} deployment of {model_id} on "
        f"{engine} {ENGINE_VERSIONS[engine]} (use the runtime image of a Dynamo release that ships it)\n"
    )
    return head + yaml.safe_dump_all(docs, sort_keys=False)
