// USDT probes written by hand, as <sys/sdt.h> would emit them (this machine has no sdt.h):
// a function with two probe sites, a .note.stapsdt note per site (owner "stapsdt", type 3:
// pc, base, semaphore, provider, name, arguments) and the .stapsdt.base section the notes
// refer to, so that readers can correct pc for prelinking.
unsigned short elf_usdt_request_semaphore __attribute__((section(".probes"), used));

__asm__(
    ".text\n"
    ".globl elf_usdt_site\n"
    ".type elf_usdt_site, @function\n"
    "elf_usdt_site:\n"
    "  mov %edi, %eax\n"
    "990: nop\n"
    "  add %esi, %eax\n"
    "995: nop\n"
    "  ret\n"
    ".size elf_usdt_site, .-elf_usdt_site\n"

    ".pushsection .note.stapsdt, \"\", \"note\"\n"
    ".balign 4\n"
    ".4byte 992f-991f, 994f-993f, 3\n"
    "991: .asciz \"stapsdt\"\n"
    "992: .balign 4\n"
    "993: .8byte 990b\n"
    ".8byte _.stapsdt.base\n"
    ".8byte elf_usdt_request_semaphore\n"
    ".asciz \"elftest\"\n"
    ".asciz \"request\"\n"
    ".asciz \"-4@%edi -4@%esi\"\n"
    "994: .balign 4\n"

    ".balign 4\n"
    ".4byte 997f-996f, 999f-998f, 3\n"
    "996: .asciz \"stapsdt\"\n"
    "997: .balign 4\n"
    "998: .8byte 995b\n"
    ".8byte _.stapsdt.base\n"
    ".8byte 0\n"
    ".asciz \"elftest\"\n"
    ".asciz \"done\"\n"
    ".asciz \"-4@%eax\"\n"
    "999: .balign 4\n"
    ".popsection\n"

    ".pushsection .stapsdt.base, \"aG\", @progbits, .stapsdt.base, comdat\n"
    ".weak _.stapsdt.base\n"
    ".hidden _.stapsdt.base\n"
    "_.stapsdt.base: .space 1\n"
    ".size _.stapsdt.base, 1\n"
    ".popsection\n");

int elf_usdt_site(int a, int b);

int main(int argc, char **argv) {
  (void)argv;
  return elf_usdt_site(argc, 2) == 3 ? 0 : 1;
}
