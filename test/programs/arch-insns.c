/* One probe site per instruction class, for checking analyzeKernelHandling() against the
 * running kernel. Each site_NAME function has the label L_NAME on the instruction to probe and
 * returns a value in %rax that shows whether that instruction ran. Usage: arch-insns NAME
 * prints "ready", waits for one byte on stdin, runs the site, prints "result=HEX", waits for
 * one more byte and exits. Sites in refused_sites() are never run: the kernel refuses probes
 * on them, so they are only ever probed, never executed. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define SITE(name, code) \
  ".globl site_" #name "\n.type site_" #name ",@function\nsite_" #name ":\n" code "\n"
#define L(name) ".globl L_" #name "\nL_" #name ":\n"

__asm__(".data\n"
        "riprel_value: .quad 0x1234\n"
        "riprel_pointer: .quad helper_return_6\n"
        ".text\n"
        "helper_return_6: mov $6,%eax\n ret\n"

        /* Emulated: push of a register, relative branches, nops. */
        SITE(push_rbp, "mov $1,%eax\n" L(push_rbp) "push %rbp\n pop %rbp\n ret")
        SITE(push_r12, "mov $2,%eax\n" L(push_r12) "push %r12\n pop %r12\n ret")
        SITE(call_rel32, L(call_rel32) "call 1f\n1: pop %rax\n lea 1b(%rip),%rdx\n sub %rdx,%rax\n ret")
        SITE(jmp_rel32, "mov $4,%eax\n" L(jmp_rel32) ".byte 0xe9\n .long 1f-2f\n2: mov $99,%eax\n1: ret")
        SITE(jmp_rel8, "mov $4,%eax\n" L(jmp_rel8) "jmp 1f\n mov $99,%eax\n1: ret")
        SITE(bnd_jmp, "mov $4,%eax\n" L(bnd_jmp) "bnd jmp 1f\n mov $99,%eax\n1: ret")
        SITE(je_rel8, "xor %eax,%eax\n" L(je_rel8) "je 1f\n mov $99,%eax\n1: ret")
        SITE(jne_rel32, "mov $5,%eax\n cmp $1,%eax\n" L(jne_rel32) ".byte 0x0f,0x85\n .long 1f-2f\n2: mov $99,%eax\n1: ret")
        SITE(nop, "mov $7,%eax\n" L(nop) "nop\n ret")
        SITE(xchg_ax_ax, "mov $7,%eax\n" L(xchg_ax_ax) ".byte 0x66,0x90\n ret")
        SITE(nopl_4, "mov $7,%eax\n" L(nopl_4) ".byte 0x0f,0x1f,0x40,0x00\n ret")
        SITE(nopl_7, "mov $7,%eax\n" L(nopl_7) ".byte 0x0f,0x1f,0x80,0,0,0,0\n ret")
        SITE(nopl_rcx, "mov $7,%eax\n" L(nopl_rcx) ".byte 0x0f,0x1f,0x41,0x00\n ret")
        SITE(nopw_9, "mov $7,%eax\n" L(nopw_9) ".byte 0x66,0x0f,0x1f,0x84,0,0,0,0,0\n ret")
        SITE(nop_5, "mov $7,%eax\n" L(nop_5) ".byte 0x0f,0x1f,0x44,0x00,0x00\n ret")
        SITE(data16_nop_5, "mov $7,%eax\n" L(data16_nop_5) ".byte 0x66,0x66,0x66,0x66,0x90\n ret")
        SITE(pause, "mov $7,%eax\n" L(pause) "pause\n ret")
        SITE(mov_rax_rax, "mov $7,%eax\n" L(mov_rax_rax) "mov %rax,%rax\n ret")
        SITE(lea_zero, "mov $7,%eax\n" L(lea_zero) ".byte 0x48,0x8d,0x40,0x00\n ret")

        /* Single-stepped out of line. */
        SITE(rexw_push, "mov $3,%eax\n" L(rexw_push) ".byte 0x48,0x50\n pop %rax\n ret")
        SITE(pushw, "mov $3,%eax\n" L(pushw) "pushw %ax\n add $2,%rsp\n ret")
        SITE(mov_rsp_rbp, "push %rbp\n" L(mov_rsp_rbp) "mov %rsp,%rbp\n pop %rbp\n mov $5,%eax\n ret")
        SITE(riprel_load, L(riprel_load) "mov riprel_value(%rip),%rax\n ret")
        SITE(call_riprel, L(call_riprel) "call *riprel_pointer(%rip)\n ret")
        SITE(call_rax, "lea helper_return_6(%rip),%rax\n" L(call_rax) "call *%rax\n ret")
        SITE(jmp_rax, "lea 1f(%rip),%rax\n" L(jmp_rax) "jmp *%rax\n mov $99,%eax\n1: mov $8,%eax\n ret")
        SITE(ret, "mov $9,%eax\n" L(ret) "ret")
        SITE(popf, "pushf\n" L(popf) "popf\n mov $10,%eax\n ret")
        SITE(syscall, "mov $39,%eax\n" L(syscall) "syscall\n mov $11,%eax\n ret")
        SITE(cpuid, "push %rbx\n xor %eax,%eax\n" L(cpuid) "cpuid\n pop %rbx\n mov $12,%eax\n ret")
        SITE(fs_load, L(fs_load) "mov %fs:0x28,%rdx\n mov $13,%eax\n ret")

        /* Accepted, but skipped by the kernel (VEX opcode bytes that look like branches). */
        SITE(xchg_r8, "mov $14,%eax\n mov $15,%r8d\n" L(xchg_r8) ".byte 0x41,0x90\n ret")
        SITE(vpcmpeqb, "vpxor %xmm1,%xmm1,%xmm1\n" L(vpcmpeqb) "vpcmpeqb %xmm0,%xmm0,%xmm1\n vmovq %xmm1,%rax\n ret")
        SITE(vmovdqu_store, "vpcmpeqb %xmm0,%xmm0,%xmm0\n movq $0,-16(%rsp)\n movq $0,-8(%rsp)\n" L(vmovdqu_store) "vmovdqu %xmm0,-16(%rsp)\n mov -16(%rsp),%rax\n ret")
        SITE(vmovd, "vpcmpeqb %xmm0,%xmm0,%xmm0\n mov $16,%eax\n" L(vmovd) "vmovd %xmm0,%eax\n ret")
        SITE(vpor, "vpcmpeqb %xmm0,%xmm0,%xmm0\n vpxor %xmm1,%xmm1,%xmm1\n" L(vpor) "vpor %xmm0,%xmm1,%xmm1\n vmovq %xmm1,%rax\n ret")
        SITE(vpsubsb, "mov %rsp,%rdx\n vpxor %xmm1,%xmm1,%xmm1\n" L(vpsubsb) "vpsubsb %xmm0,%xmm1,%xmm1\n mov %rsp,%rax\n sub %rdx,%rax\n mov %rdx,%rsp\n ret")
        SITE(vzeroupper, "mov $17,%eax\n" L(vzeroupper) "vzeroupper\n ret")

        /* Never run: the kernel refuses probes on these. */
        SITE(refused_sites, L(int3) "int3\n" L(hlt) "hlt\n" L(in_port) "in $0,%al\n"
             L(mov_ss) "mov %eax,%ss\n" L(lock_cmpxchg) "lock cmpxchg %rcx,(%rdx)\n"
             L(notrack_jmp) "notrack jmp *%rax\n" L(cs_nopw) ".byte 0x66,0x2e,0x0f,0x1f,0x84,0,0,0,0,0\n"
             L(vmovdqu_load) "vmovdqu (%rsi),%ymm0\n" L(vpxor) "vpxor %xmm0,%xmm0,%xmm0\n"
             L(call_0x66) ".byte 0x66,0xe8,0,0,0,0\n" L(ud2) "ud2\n ret"));

#define SITES(X) \
  X(push_rbp) X(push_r12) X(call_rel32) X(jmp_rel32) X(jmp_rel8) X(bnd_jmp) X(je_rel8) \
  X(jne_rel32) X(nop) X(xchg_ax_ax) X(nopl_4) X(nopl_7) X(nopl_rcx) X(nopw_9) X(nop_5) \
  X(data16_nop_5) X(pause) X(mov_rax_rax) X(lea_zero) X(rexw_push) X(pushw) X(mov_rsp_rbp) \
  X(riprel_load) X(call_riprel) X(call_rax) X(jmp_rax) X(ret) X(popf) X(syscall) X(cpuid) \
  X(fs_load) X(xchg_r8) X(vpcmpeqb) X(vmovdqu_store) X(vmovd) X(vpor) X(vpsubsb) X(vzeroupper)

#define DECLARE(name) long site_##name(void);
SITES(DECLARE)

int main(int argc, char **argv) {
  static const struct {
    const char *name;
    long (*run)(void);
  } sites[] = {
#define ENTRY(name) {#name, site_##name},
      SITES(ENTRY)};
  char byte;
  long (*run)(void) = NULL;
  for (size_t i = 0; argc > 1 && i < sizeof sites / sizeof sites[0]; i++) {
    if (strcmp(argv[1], sites[i].name) == 0) run = sites[i].run;
  }
  setvbuf(stdout, NULL, _IONBF, 0);
  printf("ready\n");
  if (read(0, &byte, 1) != 1) return 1;
  if (run != NULL) printf("result=%lx\n", run());
  if (read(0, &byte, 1) != 1) return 1;
  return 0;
}
