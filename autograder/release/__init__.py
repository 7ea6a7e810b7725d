"""What the instructors make from the course copy, before any grading.

* :mod:`.repository`: ``release OUT``, the student repository (solutions stubbed, hidden tests
  and private folders left out, the Classroom workflow added);
* :mod:`.answer_key`: ``regenerate``, the answer key computed by the reference solutions.

The marker regions both rely on are parsed in :mod:`autograder.markers`.
"""
