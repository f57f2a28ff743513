"""Distributed data-parallel runs on torch.distributed: launching through torchrun, joining an outside
launcher (torchrun, srun, a Kubeflow PyTorchJob), the collective benchmark, scaling arithmetic."""
