//! The seccomp programs of the sandbox: made before fork, installed in the child by
//! [`super::Prepared::confine_child`].

/// The seccomp program of [`SandboxPolicy::tcp_only`] for this architecture (None where it is
/// not written for it): `socket()` only for `AF_INET`/`AF_INET6` `SOCK_STREAM` with protocol
/// 0 or `IPPROTO_TCP` (Landlock's TCP rules do not govern Multipath TCP, `IPPROTO_MPTCP`), no
/// TCP Fast Open (`MSG_FASTOPEN` on `sendto`/`sendmsg`/`sendmmsg` connects without the
/// connect call Landlock checks), no `io_uring_setup`, no system calls of another ABI (i386
/// `socketcall`, x32), else `EACCES`.
pub(super) fn socket_filter() -> Option<Vec<libc::sock_filter>> {
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return None;
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        const LD_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
        const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
        const JGE: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
        const JSET: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
        const AND: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
        const RET: u16 = 0x06; // BPF_RET | BPF_K
        const ALLOW: u32 = 0x7fff_0000; // SECCOMP_RET_ALLOW
        const FASTOPEN: u32 = 0x2000_0000; // MSG_FASTOPEN
        let deny: u32 = 0x0005_0000 | u32::try_from(libc::EACCES).unwrap_or(13); // RET_ERRNO
        let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
        let nr = |n: libc::c_long| u32::try_from(n).unwrap_or(u32::MAX);
        let k = |n: libc::c_int| u32::try_from(n).unwrap_or(u32::MAX);
        // seccomp_data: nr at 0, arch at 4, args[i] at 16 + 8 i (low half first).
        // Jumps are relative: ALLOW is at 22, DENY at 23.
        Some(vec![
            /* 0 */ op(LD_ABS, 0, 0, 4),
            /* 1 */ op(JEQ, 0, 21, ARCH),
            /* 2 */ op(LD_ABS, 0, 0, 0),
            /* 3 */ op(JGE, 19, 0, 0x4000_0000), // x32 system calls
            /* 4 */ op(JEQ, 18, 0, nr(libc::SYS_io_uring_setup)),
            /* 5 */ op(JEQ, 12, 0, nr(libc::SYS_sendto)), // flags: args[3]
            /* 6 */ op(JEQ, 11, 0, nr(libc::SYS_sendmmsg)), // flags: args[3]
            /* 7 */ op(JEQ, 12, 0, nr(libc::SYS_sendmsg)), // flags: args[2]
            /* 8 */ op(JEQ, 0, 13, nr(libc::SYS_socket)),
            /* 9 */ op(LD_ABS, 0, 0, 16),
            /* 10 */ op(JEQ, 1, 0, k(libc::AF_INET)),
            /* 11 */ op(JEQ, 0, 11, k(libc::AF_INET6)),
            /* 12 */ op(LD_ABS, 0, 0, 24),
            /* 13 */ op(AND, 0, 0, 0xf),
            /* 14 */ op(JEQ, 0, 8, k(libc::SOCK_STREAM)),
            /* 15 */ op(LD_ABS, 0, 0, 32),
            /* 16 */ op(JEQ, 5, 0, 0),
            /* 17 */ op(JEQ, 4, 5, k(libc::IPPROTO_TCP)),
            /* 18 */ op(LD_ABS, 0, 0, 40),
            /* 19 */ op(JSET, 3, 2, FASTOPEN),
            /* 20 */ op(LD_ABS, 0, 0, 32),
            /* 21 */ op(JSET, 1, 0, FASTOPEN),
            /* 22 */ op(RET, 0, 0, ALLOW),
            /* 23 */ op(RET, 0, 0, deny),
        ])
    }
}
