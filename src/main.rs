fn main() -> std::process::ExitCode {
    hefprobe::cli::main()
}
