/// Large blocks (weights, above all) on cache lines: see `hefprobe::alloc`.
#[global_allocator]
static ALLOC: hefprobe::alloc::CacheLineAligned = hefprobe::alloc::CacheLineAligned;

fn main() -> std::process::ExitCode {
    hefprobe::cli::main()
}
