from sync.cli.app import main

main()
