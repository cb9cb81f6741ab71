from sync.cli import main

main()
