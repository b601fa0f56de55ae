// More than 65,280 sections once compiled with -c: the object file must then keep its section
// count in section 0's sh_size (e_shnum 0), its e_shstrndx in section 0's sh_link
// (SHN_XINDEX), and the section indices of symbols in .symtab_shndx. The assembler makes the
// sections: a macro invoked 66,000 times, each with its own section and global symbol.
__asm__(
    ".macro elf_many_section\n"
    ".section .elf_many.\\@, \"a\", @progbits\n"
    ".globl elf_many_\\@\n"
    ".type elf_many_\\@, @object\n"
    ".size elf_many_\\@, 1\n"
    "elf_many_\\@: .byte 1\n"
    ".endm\n"
    ".rept 66000\n"
    "elf_many_section\n"
    ".endr\n"
    ".text\n");

int elf_many_main(void) {
  return 0;
}
