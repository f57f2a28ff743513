"""Kubernetes/OpenShift: a run as a Kubeflow PyTorchJob or an Indexed Job + headless Service.

``manifests`` renders the objects (pure); ``scheduler`` applies, watches and reads them with the official
``kubernetes`` client (the optional extra ``dlbench[k8s]``, imported only when a cluster is used).
"""

from dlbench.launch.k8s.scheduler import KubeScheduler

__all__ = ["KubeScheduler"]
