"""Kubernetes/OpenShift: a run as a Kubeflow PyTorchJob or an Indexed Job + headless Service.

``manifests`` renders the objects (pure); ``scheduler`` applies, watches and reads them with the official
``kubernetes`` client (the optional extra ``dlbench[k8s]``, imported only when a cluster is used); the
generic :class:`~dlbench.launch.batch_launcher.BatchLauncher` submits, waits and collects.
"""

from dlbench.launch.batch_launcher import BatchLauncher
from dlbench.launch.k8s.scheduler import KubeScheduler


class K8sLauncher(BatchLauncher):
    """``--launcher k8s``: submit the run to the cluster of the kubeconfig, watch it, collect its reports."""

    name = "k8s"
    scheduler_class = KubeScheduler


__all__ = ["K8sLauncher", "KubeScheduler"]
