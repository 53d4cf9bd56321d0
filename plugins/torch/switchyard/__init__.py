"""Switchyard: communication scheduling for distributed Mixture-of-Experts
training. `import switchyard.torch` registers the torch.distributed backend
"switchyard"."""
