/*
 * Target for execute-out-of-line: xol_sequence() runs instructions of each class the ptrace
 * engine relocates or emulates (%rip-relative loads, stores, read-modify-writes with an
 * immediate after the displacement, lea, SSE, jcc, call, indirect call through memory, jmp,
 * push/pop, ret), each at a global label xol_iN, and stores what they computed. The program
 * prints it, so a run with a breakpoint on every label must print what a run without does.
 */
#include <stdint.h>
#include <stdio.h>

uint64_t xol_data = 0x1122334455667788;
uint64_t xol_data2;
uint32_t xol_counter = 2;
double xol_double = 2.5;
uint64_t xol_helper_hits;

__attribute__((noipa)) uint64_t xol_helper(void) { return ++xol_helper_hits * 1000; }
uint64_t (*xol_helper_ptr)(void) = xol_helper;

void xol_sequence(uint64_t *out);
__asm__(
    ".text\n"
    ".globl xol_sequence\n"
    ".type xol_sequence, @function\n"
    "xol_sequence:\n"
    "  push %rbx\n"
    "  push %r12\n"
    "  mov %rdi, %r12\n"
    ".globl xol_i0\nxol_i0: lea xol_data(%rip), %rax\n"
    ".globl xol_i1\nxol_i1: mov xol_data(%rip), %rcx\n"
    ".globl xol_i2\nxol_i2: mov %rcx, xol_data2(%rip)\n"
    ".globl xol_i3\nxol_i3: addl $5, xol_counter(%rip)\n"
    ".globl xol_i4\nxol_i4: cmpl $7, xol_counter(%rip)\n"
    ".globl xol_i5\nxol_i5: sete %dl\n"
    ".globl xol_i6\nxol_i6: movsd xol_double(%rip), %xmm0\n"
    ".globl xol_i7\nxol_i7: je 1f\n"
    "  mov $0xbad, %rdx\n"
    "1:\n"
    ".globl xol_i8\nxol_i8: call xol_helper\n"
    "  mov %rax, 32(%r12)\n"
    ".globl xol_i9\nxol_i9: call *xol_helper_ptr(%rip)\n"
    "  mov %rax, 40(%r12)\n"
    ".globl xol_i10\nxol_i10: jmp 2f\n"
    "  mov $0xbad, %rdx\n"
    "2:\n"
    ".globl xol_i11\nxol_i11: push %rdx\n"
    ".globl xol_i12\nxol_i12: pop %rbx\n"
    ".globl xol_i13\nxol_i13: cmpq $0, xol_data2(%rip)\n"
    ".globl xol_i14\nxol_i14: jne 3f\n"
    "  mov $0xbad, %rbx\n"
    "3:\n"
    "  lea xol_data(%rip), %rdi\n"
    "  mov %rdi, 0(%r12)\n"
    "  sub %rax, %rax\n"
    "  lea xol_data(%rip), %rax\n"
    "  mov %rcx, 8(%r12)\n"
    "  mov %rbx, 16(%r12)\n"
    "  movq %xmm0, %rax\n"
    "  mov %rax, 24(%r12)\n"
    "  pop %r12\n"
    "  pop %rbx\n"
    ".globl xol_i15\nxol_i15: ret\n"
    ".size xol_sequence, .-xol_sequence\n");

int main(void) {
  uint64_t out[6] = {0};
  xol_sequence(out);
  printf("data_address_ok=%d\n", out[0] == (uint64_t)&xol_data);
  printf("loaded=%llx stored=%llx\n", (unsigned long long)out[1], (unsigned long long)xol_data2);
  printf("counter=%u flag_from_cmp=%llx\n", xol_counter, (unsigned long long)(out[2] & 0xff));
  printf("double_bits=%llx\n", (unsigned long long)out[3]);
  printf("call=%llu indirect_call=%llu hits=%llu\n", (unsigned long long)out[4],
         (unsigned long long)out[5], (unsigned long long)xol_helper_hits);
  return 0;
}
