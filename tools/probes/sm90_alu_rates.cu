// Issue rates of the Hopper kernel's FP4 decode instructions on this GPU, in lanes per
// clock per SM: cvt.rn.f16x2.e4m3x2 (F2FP), lop3, prmt, mul.rn.f16x2 (HMUL2), fma.rn.f16x2.
// Each thread runs 8 independent chains of one instruction, 2 CTAs of 1024 threads per SM.
//
//     nvcc -arch=sm_90a -O3 tools/probes/sm90_alu_rates.cu -o /tmp/alu_rates && /tmp/alu_rates
//
// The decode of 8 E2M1 values costs 11 instructions of the 64-lane integer pipe (3 shifts,
// 4 lop3, 4 F2FP) and 4 HMUL2 of the 128-lane fp16 pipe (docs/performance.md, "Regimes").
#include <cstdio>
#include <cuda_fp16.h>
#define N 8
#define ITERS 4096
template <int OP>
__global__ void k(unsigned *out, unsigned seed) {
  unsigned r[N];
#pragma unroll
  for (int i = 0; i < N; i++) r[i] = seed * (threadIdx.x + i * 7919u);
  for (int it = 0; it < ITERS; it++) {
#pragma unroll
    for (int i = 0; i < N; i++) {
      if (OP == 0) { unsigned short s = (unsigned short)r[i]; asm volatile("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r[i]) : "h"(s)); }
      if (OP == 1) asm volatile("lop3.b32 %0, %0, %1, 0x0F0F0F0F, 0x6a;" : "+r"(r[i]) : "r"(r[(i+1)%N]));
      if (OP == 2) asm volatile("mul.rn.f16x2 %0, %0, %1;" : "+r"(r[i]) : "r"(r[(i+1)%N]));
      if (OP == 3) asm volatile("prmt.b32 %0, %0, %1, 0x3210;" : "+r"(r[i]) : "r"(r[(i+3)%N]));
      if (OP == 4) asm volatile("fma.rn.f16x2 %0, %0, %1, %1;" : "+r"(r[i]) : "r"(r[(i+1)%N]));
    }
  }
  unsigned acc = 0;
  for (int i = 0; i < N; i++) acc ^= r[i];
  if (acc == 0x12345678u) out[0] = acc;
}
template <int OP> void run(const char *name, int sms, int clk_khz) {
  unsigned *o; cudaMalloc(&o, 4);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  int threads = 1024, blocks = sms * 2;
  k<OP><<<blocks, threads>>>(o, 1);
  cudaEventRecord(a); k<OP><<<blocks, threads>>>(o, 3); cudaEventRecord(b); cudaEventSynchronize(b);
  float ms; cudaEventElapsedTime(&ms, a, b);
  double ops = (double)blocks * threads * N * ITERS;
  double per_clk_sm = ops / (ms * 1e-3) / sms / (clk_khz * 1e3);
  printf("%-28s %8.3f ms  %6.1f lanes/clk/SM (at %d MHz)\n", name, ms, per_clk_sm, clk_khz / 1000);
}
int main() {
  cudaDeviceProp p; cudaGetDeviceProperties(&p, 0);
  int clk; cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
  run<0>("cvt.rn.f16x2.e4m3x2", p.multiProcessorCount, clk);
  run<1>("lop3.b32", p.multiProcessorCount, clk);
  run<2>("mul.rn.f16x2", p.multiProcessorCount, clk);
  run<3>("prmt.b32", p.multiProcessorCount, clk);
  run<4>("fma.rn.f16x2", p.multiProcessorCount, clk);
  return 0;
}
