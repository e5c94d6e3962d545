"""What an iteration costs: model architectures, GPUs, measured profiles and the step-time model."""
