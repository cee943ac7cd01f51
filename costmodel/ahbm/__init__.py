"""Differentiable latency model of the ADR-0060 AHBM attention kernels, checked by a SimPy
event simulation; gradient tuning of TILE / C / P / pipelining and hardware elasticities."""
