from hostkit._launch import main

main()
