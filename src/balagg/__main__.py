from balagg.cli import exit_without_teardown, main

if __name__ == "__main__":
    exit_without_teardown(main())
