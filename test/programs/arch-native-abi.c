/* Prints, as JSON, the kernel ABI numbers src/native/constants.ts hard-codes, as this
 * machine's headers and compiler define them: syscall numbers, BPF commands and map types,
 * the BPF_MAP_CREATE layout of union bpf_attr, and mount flags. */
#include <linux/bpf.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/syscall.h>

#define ATTR(field) offsetof(union bpf_attr, field)

int main(void) {
  printf("{\"SYSCALL\":{");
  printf("\"close\":%d,\"mmap\":%d,\"munmap\":%d,\"ioctl\":%d,\"getpid\":%d,\"wait4\":%d,", SYS_close,
         SYS_mmap, SYS_munmap, SYS_ioctl, SYS_getpid, SYS_wait4);
  printf("\"kill\":%d,\"ptrace\":%d,\"mount\":%d,\"gettid\":%d,\"tgkill\":%d,\"waitid\":%d,", SYS_kill,
         SYS_ptrace, SYS_mount, SYS_gettid, SYS_tgkill, SYS_waitid);
  printf("\"perf_event_open\":%d,\"process_vm_readv\":%d,\"process_vm_writev\":%d,\"bpf\":%d},",
         SYS_perf_event_open, SYS_process_vm_readv, SYS_process_vm_writev, SYS_bpf);
  printf("\"BPF_CMD\":{\"BPF_MAP_CREATE\":%d,\"BPF_MAP_LOOKUP_ELEM\":%d,\"BPF_MAP_UPDATE_ELEM\":%d,",
         BPF_MAP_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM);
  printf("\"BPF_MAP_DELETE_ELEM\":%d,\"BPF_MAP_GET_NEXT_KEY\":%d,\"BPF_PROG_LOAD\":%d},",
         BPF_MAP_DELETE_ELEM, BPF_MAP_GET_NEXT_KEY, BPF_PROG_LOAD);
  printf("\"BPF_MAP_TYPE\":{\"BPF_MAP_TYPE_HASH\":%d,\"BPF_MAP_TYPE_ARRAY\":%d,", BPF_MAP_TYPE_HASH,
         BPF_MAP_TYPE_ARRAY);
  printf("\"BPF_MAP_TYPE_PERF_EVENT_ARRAY\":%d,\"BPF_MAP_TYPE_PERCPU_HASH\":%d,",
         BPF_MAP_TYPE_PERF_EVENT_ARRAY, BPF_MAP_TYPE_PERCPU_HASH);
  printf("\"BPF_MAP_TYPE_PERCPU_ARRAY\":%d,\"BPF_MAP_TYPE_STACK_TRACE\":%d,\"BPF_MAP_TYPE_RINGBUF\":%d},",
         BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_STACK_TRACE, BPF_MAP_TYPE_RINGBUF);
  printf("\"BPF_MAP_CREATE_ATTR\":{\"map_type\":%zu,\"key_size\":%zu,\"value_size\":%zu,", ATTR(map_type),
         ATTR(key_size), ATTR(value_size));
  printf("\"max_entries\":%zu,\"map_flags\":%zu,\"inner_map_fd\":%zu,\"numa_node\":%zu,", ATTR(max_entries),
         ATTR(map_flags), ATTR(inner_map_fd), ATTR(numa_node));
  printf("\"map_name\":%zu,\"map_ifindex\":%zu,\"btf_fd\":%zu,\"btf_key_type_id\":%zu,", ATTR(map_name),
         ATTR(map_ifindex), ATTR(btf_fd), ATTR(btf_key_type_id));
  printf("\"btf_value_type_id\":%zu,\"btf_vmlinux_value_type_id\":%zu,\"map_extra\":%zu,",
         ATTR(btf_value_type_id), ATTR(btf_vmlinux_value_type_id), ATTR(map_extra));
  printf("\"sizeBytes\":%zu},", offsetof(union bpf_attr, map_extra) + sizeof(__u64));
  printf("\"MOUNT_FLAGS\":{\"MS_RDONLY\":%d,\"MS_NOSUID\":%d,\"MS_NODEV\":%d,\"MS_NOEXEC\":%d,\"MS_RELATIME\":%d}}\n",
         MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_RELATIME);
  return 0;
}
