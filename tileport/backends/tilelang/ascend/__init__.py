"""TileLang kernels for Ascend arch35 (Ascend 950, the tilelang wheel's built-in ``ascend`` target): Unified
Buffer tiles, ``T.Pipelined`` double buffering, SIMT vector sub-kernels. Lowered to Ascend C here; compiling
needs CANN's bisheng and running needs an NPU with torch_npu."""
