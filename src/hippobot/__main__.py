from hippobot.cli.main import main

main()
