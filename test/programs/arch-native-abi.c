/* Prints, as JSON, the kernel ABI numbers src/native/constants.ts hard-codes, as this
 * machine's headers and compiler define them: syscall numbers, BPF commands and map types,
 * the BPF_MAP_CREATE layout of union bpf_attr, and mount flags. */
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mount.h>
#include <linux/prctl.h>
#include <linux/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>

#define ATTR(field) offsetof(union bpf_attr, field)

int main(void) {
  printf("{\"SYSCALL\":{");
  printf("\"close\":%d,\"mmap\":%d,\"mprotect\":%d,\"munmap\":%d,\"ioctl\":%d,\"getpid\":%d,\"wait4\":%d,",
         SYS_close, SYS_mmap, SYS_mprotect, SYS_munmap, SYS_ioctl, SYS_getpid, SYS_wait4);
  printf("\"rt_sigprocmask\":%d,", SYS_rt_sigprocmask);
  printf("\"sigaltstack\":%d,", SYS_sigaltstack);
  printf("\"kill\":%d,\"ptrace\":%d,\"mount\":%d,\"gettid\":%d,\"tgkill\":%d,\"waitid\":%d,", SYS_kill,
         SYS_ptrace, SYS_mount, SYS_gettid, SYS_tgkill, SYS_waitid);
  printf("\"ftruncate\":%d,\"memfd_create\":%d,", SYS_ftruncate, SYS_memfd_create);
  printf("\"perf_event_open\":%d,\"process_vm_readv\":%d,\"process_vm_writev\":%d,\"bpf\":%d},",
         SYS_perf_event_open, SYS_process_vm_readv, SYS_process_vm_writev, SYS_bpf);
  printf("\"BPF_CMD\":{\"BPF_MAP_CREATE\":%d,\"BPF_MAP_LOOKUP_ELEM\":%d,\"BPF_MAP_UPDATE_ELEM\":%d,",
         BPF_MAP_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM);
  printf("\"BPF_MAP_DELETE_ELEM\":%d,\"BPF_MAP_GET_NEXT_KEY\":%d,\"BPF_PROG_LOAD\":%d,",
         BPF_MAP_DELETE_ELEM, BPF_MAP_GET_NEXT_KEY, BPF_PROG_LOAD);
  printf("\"BPF_OBJ_GET_INFO_BY_FD\":%d,\"BPF_RAW_TRACEPOINT_OPEN\":%d,",
         BPF_OBJ_GET_INFO_BY_FD, BPF_RAW_TRACEPOINT_OPEN);
  printf("\"BPF_BTF_LOAD\":%d,\"BPF_MAP_LOOKUP_BATCH\":%d,", BPF_BTF_LOAD, BPF_MAP_LOOKUP_BATCH);
  printf("\"BPF_MAP_UPDATE_BATCH\":%d,\"BPF_LINK_CREATE\":%d},", BPF_MAP_UPDATE_BATCH,
         BPF_LINK_CREATE);
  printf("\"BPF_PROG_TYPE\":{\"BPF_PROG_TYPE_KPROBE\":%d,\"BPF_PROG_TYPE_RAW_TRACEPOINT\":%d},",
         BPF_PROG_TYPE_KPROBE, BPF_PROG_TYPE_RAW_TRACEPOINT);
  printf("\"BPF_ATTACH_TYPE\":{\"BPF_PERF_EVENT\":%d},", BPF_PERF_EVENT);
#define FUNC(name) printf("\"" #name "\":%d,", BPF_FUNC_##name)
  printf("\"BPF_FUNC\":{");
  FUNC(map_lookup_elem); FUNC(map_update_elem); FUNC(map_delete_elem); FUNC(ktime_get_ns);
  FUNC(get_smp_processor_id); FUNC(get_current_pid_tgid); FUNC(get_current_comm); FUNC(get_stackid);
  FUNC(get_current_task);
  FUNC(probe_read_user); FUNC(probe_read_kernel); FUNC(probe_read_user_str); FUNC(ringbuf_output);
  FUNC(ringbuf_reserve); FUNC(ringbuf_submit); FUNC(ringbuf_discard); FUNC(get_current_task_btf);
  FUNC(get_attach_cookie); FUNC(find_vma); FUNC(send_signal);
  printf("\"loop\":%d},", BPF_FUNC_loop);
  printf("\"BPF_PROG_LOAD_ATTR\":{\"prog_type\":%zu,\"insn_cnt\":%zu,\"insns\":%zu,\"license\":%zu,",
         ATTR(prog_type), ATTR(insn_cnt), ATTR(insns), ATTR(license));
  printf("\"log_level\":%zu,\"log_size\":%zu,\"log_buf\":%zu,\"kern_version\":%zu,", ATTR(log_level),
         ATTR(log_size), ATTR(log_buf), ATTR(kern_version));
  printf("\"prog_flags\":%zu,\"prog_name\":%zu,\"expected_attach_type\":%zu,", ATTR(prog_flags),
         ATTR(prog_name), ATTR(expected_attach_type));
  printf("\"prog_btf_fd\":%zu,\"func_info_rec_size\":%zu,\"func_info\":%zu,\"func_info_cnt\":%zu},",
         ATTR(prog_btf_fd), ATTR(func_info_rec_size), ATTR(func_info), ATTR(func_info_cnt));
  printf("\"BPF_BTF_LOAD_ATTR\":{\"btf\":%zu,\"btf_log_buf\":%zu,\"btf_size\":%zu,", ATTR(btf),
         ATTR(btf_log_buf), ATTR(btf_size));
  printf("\"btf_log_size\":%zu,\"btf_log_level\":%zu},", ATTR(btf_log_size), ATTR(btf_log_level));
  printf("\"BPF_MAP_BATCH_ATTR\":{\"in_batch\":%zu,\"out_batch\":%zu,\"keys\":%zu,", ATTR(batch.in_batch),
         ATTR(batch.out_batch), ATTR(batch.keys));
  printf("\"values\":%zu,\"count\":%zu,\"map_fd\":%zu,\"elem_flags\":%zu,\"flags\":%zu},",
         ATTR(batch.values), ATTR(batch.count), ATTR(batch.map_fd), ATTR(batch.elem_flags), ATTR(batch.flags));
  printf("\"BPF_MAP_ELEM_ATTR\":{\"map_fd\":%zu,\"key\":%zu,\"value\":%zu,\"next_key\":%zu,\"flags\":%zu},",
         ATTR(map_fd), ATTR(key), ATTR(value), ATTR(next_key), ATTR(flags));
  printf("\"BPF_LINK_CREATE_ATTR\":{\"prog_fd\":%zu,\"target_fd\":%zu,\"attach_type\":%zu,",
         ATTR(link_create.prog_fd), ATTR(link_create.target_fd), ATTR(link_create.attach_type));
  printf("\"flags\":%zu,\"bpf_cookie\":%zu},", ATTR(link_create.flags),
         ATTR(link_create.perf_event.bpf_cookie));
  printf("\"BPF_RAW_TRACEPOINT_ATTR\":{\"name\":%zu,\"prog_fd\":%zu},", ATTR(raw_tracepoint.name),
         ATTR(raw_tracepoint.prog_fd));
  printf("\"BPF_ATTR_BYTES\":%zu,", sizeof(union bpf_attr));
#define PERF(field) printf("\"" #field "\":%zu,", offsetof(struct perf_event_attr, field))
  printf("\"PERF_EVENT_ATTR\":{");
  PERF(type); PERF(size); PERF(config); PERF(sample_period);
  printf("\"flags\":%zu,", offsetof(struct perf_event_attr, read_format) + sizeof(__u64));
  PERF(wakeup_events); PERF(config1); PERF(config2);
  printf("\"sizeBytes\":%zu},", sizeof(struct perf_event_attr));
  printf("\"PERF_EVENT_IOC\":{\"PERF_EVENT_IOC_ENABLE\":%d,\"PERF_EVENT_IOC_DISABLE\":%d,",
         PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_DISABLE);
  printf("\"PERF_EVENT_IOC_SET_BPF\":%lu,\"PERF_FLAG_FD_CLOEXEC\":%d},",
         (unsigned long)PERF_EVENT_IOC_SET_BPF, PERF_FLAG_FD_CLOEXEC);
  printf("\"BPF_MAP_TYPE\":{\"BPF_MAP_TYPE_HASH\":%d,\"BPF_MAP_TYPE_ARRAY\":%d,", BPF_MAP_TYPE_HASH,
         BPF_MAP_TYPE_ARRAY);
  printf("\"BPF_MAP_TYPE_PERF_EVENT_ARRAY\":%d,\"BPF_MAP_TYPE_PERCPU_HASH\":%d,",
         BPF_MAP_TYPE_PERF_EVENT_ARRAY, BPF_MAP_TYPE_PERCPU_HASH);
  printf("\"BPF_MAP_TYPE_PERCPU_ARRAY\":%d,\"BPF_MAP_TYPE_STACK_TRACE\":%d,\"BPF_MAP_TYPE_LRU_HASH\":%d,",
         BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_STACK_TRACE, BPF_MAP_TYPE_LRU_HASH);
  printf("\"BPF_MAP_TYPE_LPM_TRIE\":%d,", BPF_MAP_TYPE_LPM_TRIE);
  printf("\"BPF_MAP_TYPE_RINGBUF\":%d},", BPF_MAP_TYPE_RINGBUF);
  printf("\"BPF_MAP_CREATE_ATTR\":{\"map_type\":%zu,\"key_size\":%zu,\"value_size\":%zu,", ATTR(map_type),
         ATTR(key_size), ATTR(value_size));
  printf("\"max_entries\":%zu,\"map_flags\":%zu,\"inner_map_fd\":%zu,\"numa_node\":%zu,", ATTR(max_entries),
         ATTR(map_flags), ATTR(inner_map_fd), ATTR(numa_node));
  printf("\"map_name\":%zu,\"map_ifindex\":%zu,\"btf_fd\":%zu,\"btf_key_type_id\":%zu,", ATTR(map_name),
         ATTR(map_ifindex), ATTR(btf_fd), ATTR(btf_key_type_id));
  printf("\"btf_value_type_id\":%zu,\"btf_vmlinux_value_type_id\":%zu,\"map_extra\":%zu,",
         ATTR(btf_value_type_id), ATTR(btf_vmlinux_value_type_id), ATTR(map_extra));
  printf("\"sizeBytes\":%zu},", offsetof(union bpf_attr, map_extra) + sizeof(__u64));
  printf("\"MOUNT_FLAGS\":{\"MS_RDONLY\":%d,\"MS_NOSUID\":%d,\"MS_NODEV\":%d,\"MS_NOEXEC\":%d,\"MS_RELATIME\":%d},",
         MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_RELATIME);
  printf("\"PTRACE\":{\"PTRACE_CONT\":%d,\"PTRACE_KILL\":%d,\"PTRACE_SINGLESTEP\":%d,", PTRACE_CONT,
         PTRACE_KILL, PTRACE_SINGLESTEP);
  printf("\"PTRACE_GETREGS\":%d,\"PTRACE_SETREGS\":%d,\"PTRACE_DETACH\":%d,", PTRACE_GETREGS,
         PTRACE_SETREGS, PTRACE_DETACH);
  printf("\"PTRACE_SETOPTIONS\":%d,\"PTRACE_GETEVENTMSG\":%d,\"PTRACE_GETSIGINFO\":%d,",
         PTRACE_SETOPTIONS, PTRACE_GETEVENTMSG, PTRACE_GETSIGINFO);
  printf("\"PTRACE_SEIZE\":%d,\"PTRACE_INTERRUPT\":%d,\"PTRACE_LISTEN\":%d,", PTRACE_SEIZE,
         PTRACE_INTERRUPT, PTRACE_LISTEN);
  printf("\"PTRACE_GETSIGMASK\":%d,\"PTRACE_SETSIGMASK\":%d,\"PTRACE_SECCOMP_GET_FILTER\":%d},",
         PTRACE_GETSIGMASK, PTRACE_SETSIGMASK, PTRACE_SECCOMP_GET_FILTER);
  printf("\"PTRACE_O\":{\"PTRACE_O_TRACESYSGOOD\":%d,\"PTRACE_O_TRACEFORK\":%d,", PTRACE_O_TRACESYSGOOD,
         PTRACE_O_TRACEFORK);
  printf("\"PTRACE_O_TRACEVFORK\":%d,\"PTRACE_O_TRACECLONE\":%d,\"PTRACE_O_TRACEEXEC\":%d,",
         PTRACE_O_TRACEVFORK, PTRACE_O_TRACECLONE, PTRACE_O_TRACEEXEC);
  printf("\"PTRACE_O_TRACEVFORKDONE\":%d,", PTRACE_O_TRACEVFORKDONE);
  printf("\"PTRACE_O_TRACEEXIT\":%d,\"PTRACE_O_EXITKILL\":%d},", PTRACE_O_TRACEEXIT,
         PTRACE_O_EXITKILL);
  printf("\"PTRACE_EVENT\":{\"PTRACE_EVENT_FORK\":%d,\"PTRACE_EVENT_VFORK\":%d,", PTRACE_EVENT_FORK,
         PTRACE_EVENT_VFORK);
  printf("\"PTRACE_EVENT_CLONE\":%d,\"PTRACE_EVENT_EXEC\":%d,\"PTRACE_EVENT_VFORK_DONE\":%d,",
         PTRACE_EVENT_CLONE, PTRACE_EVENT_EXEC, PTRACE_EVENT_VFORK_DONE);
  printf("\"PTRACE_EVENT_EXIT\":%d,\"PTRACE_EVENT_STOP\":%d},", PTRACE_EVENT_EXIT,
         PTRACE_EVENT_STOP);
  printf("\"WAIT\":{\"WNOHANG\":%d,\"WUNTRACED\":%d,\"__WALL\":%d},", WNOHANG, WUNTRACED, __WALL);
  printf("\"PRCTL\":{\"PR_SET_PDEATHSIG\":%d},", PR_SET_PDEATHSIG);
#define REG(field) printf("\"" #field "\":%zu,", offsetof(struct user_regs_struct, field))
  printf("\"USER_REGS\":{");
  REG(r15); REG(r14); REG(r13); REG(r12); REG(rbp); REG(rbx); REG(r11); REG(r10); REG(r9); REG(r8);
  REG(rax); REG(rcx); REG(rdx); REG(rsi); REG(rdi); REG(orig_rax); REG(rip); REG(cs); REG(eflags);
  REG(rsp); REG(ss); REG(fs_base); REG(gs_base); REG(ds); REG(es); REG(fs); REG(gs);
  printf("\"sizeBytes\":%zu}}\n", sizeof(struct user_regs_struct));
  return 0;
}
