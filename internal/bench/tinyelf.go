package bench

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	goruntime "runtime"
)

// tinyELF is the smallest static program there is: one page-aligned
// segment whose code makes a single exit(code) system call, no libc, no
// loader, no page beyond its own. Spawned inside a sandbox it is gVisor's
// floor for starting any process (clone, execve of a tiny image, exit,
// wait), the anchor of the exec figure. It is built for the host's
// architecture, which is the sandbox's.
func tinyELF(code byte) ([]byte, error) {
	var text []byte
	var machine elf.Machine
	switch goruntime.GOARCH {
	case "amd64":
		machine = elf.EM_X86_64
		// mov edi, code; mov eax, 60 (exit); syscall
		text = []byte{0xbf, code, 0, 0, 0, 0xb8, 60, 0, 0, 0, 0x0f, 0x05}
	case "arm64":
		machine = elf.EM_AARCH64
		// movz x0, #code; movz x8, #93 (exit); svc #0
		movz := func(reg, imm uint32) []byte { return binary.LittleEndian.AppendUint32(nil, 0xd2800000|imm<<5|reg) }
		text = append(append(movz(0, uint32(code)), movz(8, 93)...), 0x01, 0x00, 0x00, 0xd4)
	default:
		return nil, fmt.Errorf("no tiny static program for %s", goruntime.GOARCH)
	}
	return elfImage(machine, text), nil
}

// spawnTimerELF is a static program without libc that times spawns:
// `timer N prog args...` runs prog (with an empty environment) N times,
// each a vfork, execve, exit and wait4 timed with CLOCK_MONOTONIC around
// them, and writes the N durations to stdout as little-endian int64
// nanoseconds (-1 for a run that did not exit 0). It is the floor's
// stopwatch: a timer in Python or C with libc adds its own system calls
// (glibc's posix_spawn queries every signal's handler in the child) and
// its own page faults, each a round trip to the sentry. amd64 only (nil
// elsewhere; the bench falls back to Python's posix_spawn).
func spawnTimerELF() []byte {
	if goruntime.GOARCH != "amd64" {
		return nil
	}
	return elfImage(elf.EM_X86_64, spawnTimerAMD64)
}

// elfImage wraps text in a static executable: one read+execute segment
// holding the headers and the code, entered at the code.
func elfImage(machine elf.Machine, text []byte) []byte {
	const base = 0x400000
	hdrSize := uint64(binary.Size(elf.Header64{}) + binary.Size(elf.Prog64{}))
	size := hdrSize + uint64(len(text))
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Entry: base + hdrSize, Phoff: uint64(binary.Size(elf.Header64{})),
		Ehsize: uint16(binary.Size(elf.Header64{})), Phentsize: uint16(binary.Size(elf.Prog64{})), Phnum: 1,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	p := elf.Prog64{
		Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X),
		Vaddr: base, Paddr: base, Filesz: size, Memsz: size, Align: 0x1000,
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, h)
	binary.Write(&b, binary.LittleEndian, p)
	b.Write(text)
	return b.Bytes()
}

// spawnTimerAMD64 is the code of spawnTimerELF, assembled (GNU as, Intel
// syntax) from:
//
//	_start:
//	 mov rsi, [rsp+16]        # argv[1]: the count
//	 xor r14, r14
//	1: movzx eax, byte ptr [rsi]
//	 test al, al
//	 jz 2f
//	 sub eax, 48
//	 imul r14, r14, 10
//	 add r14, rax
//	 inc rsi
//	 jmp 1b
//	2: mov rbx, rsp             # rbx: argv - 8 (argc at [rbx])
//	 lea rax, [r14*8]
//	 sub rsp, rax             # the samples, on the stack
//	 and rsp, -16
//	 mov r13, rsp             # r13: the samples
//	 xor r15, r15             # r15: i
//	 sub rsp, 48              # [rsp]: t0, [rsp+16]: t1, [rsp+32]: status
//	3: mov eax, 228             # clock_gettime(CLOCK_MONOTONIC, &t0)
//	 mov edi, 1
//	 mov rsi, rsp
//	 syscall
//	 mov eax, 58              # vfork
//	 syscall
//	 test eax, eax
//	 jnz 4f
//	 mov eax, 59              # child: execve(argv[2], &argv[2], &argv[argc]: no env)
//	 mov rdi, [rbx+24]
//	 lea rsi, [rbx+24]
//	 mov rcx, [rbx]
//	 lea rdx, [rbx+rcx*8+8]
//	 syscall
//	 mov eax, 60              # exit(127)
//	 mov edi, 127
//	 syscall
//	4: mov rdi, -1              # wait4(-1, &status, 0, NULL)
//	 lea rsi, [rsp+32]
//	 xor edx, edx
//	 xor r10, r10
//	 mov eax, 61
//	 syscall
//	 mov eax, 228             # clock_gettime(CLOCK_MONOTONIC, &t1)
//	 mov edi, 1
//	 lea rsi, [rsp+16]
//	 syscall
//	 mov rax, [rsp+16]
//	 sub rax, [rsp]
//	 imul rax, rax, 1000000000
//	 add rax, [rsp+24]
//	 sub rax, [rsp+8]
//	 mov ecx, [rsp+32]
//	 test ecx, ecx
//	 jz 5f
//	 mov rax, -1              # a child that did not exit 0
//	5: mov [r13+r15*8], rax
//	 inc r15
//	 cmp r15, r14
//	 jb 3b
//	 mov eax, 1               # write(1, samples, 8*count)
//	 mov edi, 1
//	 mov rsi, r13
//	 lea rdx, [r14*8]
//	 syscall
//	 mov eax, 60              # exit(0)
//	 xor edi, edi
//	 syscall
var spawnTimerAMD64 = []byte{
	0x48, 0x8b, 0x74, 0x24, 0x10, 0x4d, 0x31, 0xf6, 0x0f, 0xb6, 0x06, 0x84,
	0xc0, 0x74, 0x0f, 0x83, 0xe8, 0x30, 0x4d, 0x6b, 0xf6, 0x0a, 0x49, 0x01,
	0xc6, 0x48, 0xff, 0xc6, 0xeb, 0xea, 0x48, 0x89, 0xe3, 0x4a, 0x8d, 0x04,
	0xf5, 0x00, 0x00, 0x00, 0x00, 0x48, 0x29, 0xc4, 0x48, 0x83, 0xe4, 0xf0,
	0x49, 0x89, 0xe5, 0x4d, 0x31, 0xff, 0x48, 0x83, 0xec, 0x30, 0xb8, 0xe4,
	0x00, 0x00, 0x00, 0xbf, 0x01, 0x00, 0x00, 0x00, 0x48, 0x89, 0xe6, 0x0f,
	0x05, 0xb8, 0x3a, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x85, 0xc0, 0x75, 0x23,
	0xb8, 0x3b, 0x00, 0x00, 0x00, 0x48, 0x8b, 0x7b, 0x18, 0x48, 0x8d, 0x73,
	0x18, 0x48, 0x8b, 0x0b, 0x48, 0x8d, 0x54, 0xcb, 0x08, 0x0f, 0x05, 0xb8,
	0x3c, 0x00, 0x00, 0x00, 0xbf, 0x7f, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48,
	0xc7, 0xc7, 0xff, 0xff, 0xff, 0xff, 0x48, 0x8d, 0x74, 0x24, 0x20, 0x31,
	0xd2, 0x4d, 0x31, 0xd2, 0xb8, 0x3d, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xb8,
	0xe4, 0x00, 0x00, 0x00, 0xbf, 0x01, 0x00, 0x00, 0x00, 0x48, 0x8d, 0x74,
	0x24, 0x10, 0x0f, 0x05, 0x48, 0x8b, 0x44, 0x24, 0x10, 0x48, 0x2b, 0x04,
	0x24, 0x48, 0x69, 0xc0, 0x00, 0xca, 0x9a, 0x3b, 0x48, 0x03, 0x44, 0x24,
	0x18, 0x48, 0x2b, 0x44, 0x24, 0x08, 0x8b, 0x4c, 0x24, 0x20, 0x85, 0xc9,
	0x74, 0x07, 0x48, 0xc7, 0xc0, 0xff, 0xff, 0xff, 0xff, 0x4b, 0x89, 0x44,
	0xfd, 0x00, 0x49, 0xff, 0xc7, 0x4d, 0x39, 0xf7, 0x0f, 0x82, 0x60, 0xff,
	0xff, 0xff, 0xb8, 0x01, 0x00, 0x00, 0x00, 0xbf, 0x01, 0x00, 0x00, 0x00,
	0x4c, 0x89, 0xee, 0x4a, 0x8d, 0x14, 0xf5, 0x00, 0x00, 0x00, 0x00, 0x0f,
	0x05, 0xb8, 0x3c, 0x00, 0x00, 0x00, 0x31, 0xff, 0x0f, 0x05,
}
