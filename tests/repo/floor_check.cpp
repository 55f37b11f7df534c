int main() { return 0; }  // tests/repo/floor_check.cpp: linked with one floor whole (CMakeLists.txt)
